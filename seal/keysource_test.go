package seal_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem/seal"
)

// keyLine is a key file line: name and 32 random bytes (or n bytes).
func keyLine(t testing.TB, name string, n int) (string, []byte) {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	enc := base64.StdEncoding.EncodeToString(b)
	return name + ":" + enc, []byte(enc)
}

func keyFile(t testing.TB, names ...string) string {
	t.Helper()
	var lines []string
	for _, n := range names {
		l, _ := keyLine(t, n, seal.DataKeyBytes)
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n") + "\n"
}

func TestFileKeySourceWrapsUnderFirstUnwrapsUnderAny(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, _ := keyLine(t, "2026-b", seal.DataKeyBytes)
	b, _ := keyLine(t, "2025-a", seal.DataKeyBytes)
	old, err := seal.ParseKeyFile("keys", []byte(b+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	both, err := seal.ParseKeyFile("keys", []byte("# newest first\n\n"+a+"\n"+b+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if both.Newest() != "2026-b" || strings.Join(both.IDs(), ",") != "2026-b,2025-a" {
		t.Fatalf("newest %q ids %v", both.Newest(), both.IDs())
	}
	dk := bytes.Repeat([]byte{7}, seal.DataKeyBytes)
	id, wrapped, err := old.Wrap(ctx, dk)
	if err != nil || id != "2025-a" {
		t.Fatalf("wrap: %q %v", id, err)
	}
	got, err := both.Unwrap(ctx, id, wrapped)
	if err != nil || !bytes.Equal(got, dk) {
		t.Fatalf("unwrap under the second key: %v", err)
	}
	// The key id is associated data: bytes stored under one id do not
	// open as another's.
	if _, err := both.Unwrap(ctx, "2026-b", wrapped); !errors.Is(err, seal.ErrAuthentication) {
		t.Fatalf("unwrap under the wrong id: %v", err)
	}
	if _, err := old.Unwrap(ctx, "2026-b", wrapped); !errors.Is(err, seal.ErrUnknownMasterKey) {
		t.Fatalf("unwrap under a key not held: %v", err)
	}
}

func TestKeyFileBadInput(t *testing.T) {
	t.Parallel()
	good, goodB64 := keyLine(t, "a", seal.DataKeyBytes)
	short, shortB64 := keyLine(t, "s", 16)
	secretish := "b:" + strings.Repeat("Zm9v", 7) + "!!!!"
	for _, tc := range []struct {
		name, file, want string
		secret           []byte
	}{
		{"short key", good + "\n" + short + "\n", `keys:2: key "s" is 16 bytes; want 32`, shortB64},
		{"bad base64", secretish + "\n", `keys:1: key "b" is not valid base64`, []byte(strings.Repeat("Zm9v", 7))},
		{"duplicate name", good + "\n\n" + strings.Replace(good, "a:", "a :", 1) + "\n", `keys:3: key name "a" repeats line 1`, goodB64},
		{"no colon", string(goodB64) + "\n", "keys:1: want name:base64", goodB64},
		{"bad name", "a b:" + string(goodB64) + "\n", "keys:1: a key name is letters", goodB64},
		{"empty", "\n# nothing\n", "encryption key file keys: no keys", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := seal.ParseKeyFile("keys", []byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if tc.secret != nil && strings.Contains(err.Error(), string(tc.secret)) {
				t.Fatalf("the error echoes key material: %v", err)
			}
		})
	}
}

func TestLoadKeyFileUnreadable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := seal.LoadKeyFile(filepath.Join(dir, "missing")); err == nil ||
		!strings.Contains(err.Error(), "encryption key file") || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := seal.LoadKeyFile(dir); err == nil || !strings.Contains(err.Error(), "encryption key file") {
		t.Fatalf("a directory: %v", err)
	}
	p := filepath.Join(dir, "keys")
	if err := os.WriteFile(p, []byte(keyFile(t, "k1", "k0")), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := seal.LoadKeyFile(p)
	if err != nil || s.Newest() != "k1" {
		t.Fatalf("load: %v", err)
	}
}

// A KMS key source passes the data key to the caller's wrap and unwrap and
// refuses what does not unwrap to a data key.
func TestKMSKeySource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	kms := func(id string) seal.KMSKey {
		// A stand-in KMS: a file key source of one key behind the KMS
		// shape, as a cloud KMS's Encrypt and Decrypt would be.
		fs, err := seal.ParseKeyFile(id, []byte(keyFile(t, "k")))
		if err != nil {
			t.Fatal(err)
		}
		return seal.KMSKey{ID: id,
			Wrap: func(ctx context.Context, p []byte) ([]byte, error) {
				_, w, err := fs.Wrap(ctx, p)
				return w, err
			},
			Unwrap: func(ctx context.Context, c []byte) ([]byte, error) { return fs.Unwrap(ctx, "k", c) },
		}
	}
	oldKey, newKey := kms("arn:aws:kms:eu-west-1:1:key/old"), kms("arn:aws:kms:eu-west-1:1:key/new")
	old, err := seal.NewKMSKeySource(oldKey)
	if err != nil {
		t.Fatal(err)
	}
	both, err := seal.NewKMSKeySource(newKey, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	dk := bytes.Repeat([]byte{9}, seal.DataKeyBytes)
	id, w, err := old.Wrap(ctx, dk)
	if err != nil || id != oldKey.ID {
		t.Fatalf("wrap: %q %v", id, err)
	}
	if got, err := both.Unwrap(ctx, id, w); err != nil || !bytes.Equal(got, dk) {
		t.Fatalf("unwrap: %v", err)
	}
	if _, err := old.Unwrap(ctx, newKey.ID, w); !errors.Is(err, seal.ErrUnknownMasterKey) {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := seal.NewKMSKeySource(oldKey, oldKey); err == nil {
		t.Fatal("a key given twice was accepted")
	}
	if _, err := seal.NewKMSKeySource(); err == nil {
		t.Fatal("no keys was accepted")
	}
}
