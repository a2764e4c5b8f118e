package seal_test

import (
	"context"
	"log"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/seal"
)

// kmsClient is the part of a cloud KMS client a KMSKey needs: AWS KMS's
// Encrypt and Decrypt (KeyId and Plaintext in, CiphertextBlob out, and
// back), Google Cloud KMS's Encrypt and Decrypt, Azure Key Vault's
// wrapKey and unwrapKey, Vault transit's encrypt and decrypt.
type kmsClient interface {
	Encrypt(ctx context.Context, keyID string, plaintext []byte) ([]byte, error)
	Decrypt(ctx context.Context, keyID string, ciphertext []byte) ([]byte, error)
}

// A KMS holds the master key: idem sends it each tenant's new data key to
// wrap, and each stored one to unwrap once per process (the unwrapped key
// is cached). To rotate, list the new KMS key first and the old one after
// it, as in a key file, and run seal.Rotate (idem keys rotate).
func ExampleNewKMSKeySource() {
	var (
		client kmsClient     // your cloud KMS client
		db     driver.Driver // postgres.Open or sqlite.Open, migrated
	)
	const keyID = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
	src, err := seal.NewKMSKeySource(seal.KMSKey{
		ID: keyID,
		Wrap: func(ctx context.Context, dataKey []byte) ([]byte, error) {
			return client.Encrypt(ctx, keyID, dataKey)
		},
		Unwrap: func(ctx context.Context, wrapped []byte) ([]byte, error) {
			return client.Decrypt(ctx, keyID, wrapped)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	// Refuse to start when the database holds data keys this source
	// cannot unwrap, as idem serve does.
	if err := seal.CheckSource(ctx, db, src); err != nil {
		log.Fatal(err)
	}
	sealer, err := seal.New(db, src, seal.Config{})
	if err != nil {
		log.Fatal(err)
	}
	_ = sealer // hand it to what stores records
}
