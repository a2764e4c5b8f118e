package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/storage"
	"github.com/idemhq/idem/seal"
)

// masterKey is a key file line: the name and 32 random bytes.
func masterKey(t *testing.T, name string) string {
	t.Helper()
	b := make([]byte, seal.DataKeyBytes)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return name + ":" + base64.StdEncoding.EncodeToString(b) + "\n"
}

func writeKeyFile(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// openSealed opens the database db as serve does, migrated, with an
// Envelope over the key file.
func openSealed(t *testing.T, db, keyFile string) (driver.Driver, *seal.Envelope) {
	t.Helper()
	ctx := context.Background()
	d, err := storage.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	src, err := seal.LoadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	e, err := seal.New(d, src, seal.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return d, e
}

// serve and relay refuse a key file that cannot open the database's data
// keys, naming the key ids the data needs; with the right file, from the
// environment, serve starts and says it encrypts.
func TestEncryptionKeyFileAtStart(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		db := dbURL(t, dialect)
		right := writeKeyFile(t, masterKey(t, "k-old"))
		_, e := openSealed(t, db, right)
		for _, tenant := range []string{"acme", "globex"} {
			if _, err := e.Seal(ctx, "idem_keys", tenant, "k", []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		wrong := writeKeyFile(t, masterKey(t, "k-other"))
		for _, cmd := range []string{"serve", "relay"} {
			args := []string{cmd, "--db", db, "--encryption-key-file", wrong}
			if cmd == "serve" {
				args = append(args, "--addr", "127.0.0.1:0")
			}
			p := launch(t, false, nil, args...)
			if err := p.wait(60 * time.Second); err == nil {
				t.Fatalf("%s started with the wrong key file", cmd)
			}
			stderr := p.Stderr()
			if !strings.Contains(stderr, "refusing to start with encryption key file "+wrong) ||
				!strings.Contains(stderr, "2 data keys in the database are wrapped under master keys k-old") ||
				!strings.Contains(stderr, "it holds k-other") || strings.Contains(stderr, "idem serving") {
				t.Fatalf("%s with the wrong key file:\n%s", cmd, stderr)
			}
		}
		// A bad key file names its line.
		bad := writeKeyFile(t, masterKey(t, "k-old"), "short:"+base64.StdEncoding.EncodeToString([]byte("sixteen bytes..."))+"\n")
		out, stderr, code := runIdem(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", db, "--encryption-key-file", bad)
		if code != 1 || !strings.Contains(stderr, bad+`:2: key "short" is 16 bytes; want 32`) {
			t.Fatalf("a short key (%d): %s%s", code, out, stderr)
		}
		p := start(t, []string{"IDEM_ENCRYPTION_KEY_FILE=" + right}, "serve", "--addr", "127.0.0.1:0", "--db", db)
		if s := p.Stderr(); !strings.Contains(s, "encryption=on") || !strings.Contains(s, "newest_key=k-old") {
			t.Fatalf("serve with the right key file:\n%s", s)
		}
	})
}

// idem keys rotate moves every data key to the newest master key, in
// batches, and --check agrees before and after; then the old key can go.
// idem tenants forget destroys a tenant's keys once.
func TestKeysRotateAndTenantsForget(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		db := dbURL(t, dialect)
		oldKey, newKey := masterKey(t, "k-old"), masterKey(t, "k-new")
		oldOnly, both, newOnly := writeKeyFile(t, oldKey), writeKeyFile(t, newKey, oldKey), writeKeyFile(t, newKey)
		d, e := openSealed(t, db, oldOnly)
		tenants := []string{"acme", "globex", "initech"}
		sealed := map[string][]byte{}
		for _, tenant := range tenants {
			s, err := e.Seal(ctx, "idem_outbox", tenant, "m1", []byte("payload of "+tenant))
			if err != nil {
				t.Fatal(err)
			}
			sealed[tenant] = s
		}

		out, stderr, code := runIdem(t, nil, "keys", "rotate", "--check", "--db", db, "--encryption-key-file", both)
		if code != 1 || !strings.Contains(out, `other than the newest ("k-new") still wrap data keys: k-old (3 data keys)`) ||
			!strings.Contains(stderr, "run idem keys rotate") {
			t.Fatalf("check before (%d): %s%s", code, out, stderr)
		}
		out, stderr, code = runIdem(t, []string{"IDEM_ENCRYPTION_KEY_FILE=" + both}, "keys", "rotate", "--db", db, "--batch", "2")
		if code != 0 || !strings.Contains(out, "re-wrapped 3 of 3 data keys") || !strings.Contains(out, `done: 3 data keys re-wrapped under "k-new"`) {
			t.Fatalf("rotate (%d): %s%s", code, out, stderr)
		}
		out, stderr, code = runIdem(t, nil, "keys", "rotate", "--check", "--db", db, "--encryption-key-file", both)
		if code != 0 || !strings.Contains(out, `ok: every data key (3) is wrapped under the newest master key "k-new"`) {
			t.Fatalf("check after (%d): %s%s", code, out, stderr)
		}
		// Resumed or repeated: nothing left to do.
		out, _, code = runIdem(t, nil, "keys", "rotate", "--db", db, "--encryption-key-file", both)
		if code != 0 || !strings.Contains(out, "done: 0 data keys") {
			t.Fatalf("rotate again (%d): %s", code, out)
		}
		// The old key removed from the file: every record opens.
		_, e2 := openSealed(t, db, newOnly)
		for tenant, s := range sealed {
			if got, err := e2.Open(ctx, "idem_outbox", tenant, "m1", s); err != nil || string(got) != "payload of "+tenant {
				t.Fatalf("%s without the old key: %q %v", tenant, got, err)
			}
		}
		if _, _, code := runIdem(t, nil, "keys", "rotate", "--db", db); code != 2 {
			t.Fatalf("rotate without a key file: exit %d, want 2", code)
		}

		out, stderr, code = runIdem(t, nil, "tenants", "forget", "--db", db, "acme")
		if code != 0 || !strings.Contains(out, `forgot tenant "acme": 1 data keys destroyed`) {
			t.Fatalf("forget (%d): %s%s", code, out, stderr)
		}
		tx, err := d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		rows, err := d.DataKeys(ctx, tx, &driver.DataKeysParams{Tenant: "acme"})
		tx.Rollback(ctx)
		if err != nil || len(rows) != 1 || len(rows[0].Wrapped) != 0 || rows[0].ForgottenAt.IsZero() {
			t.Fatalf("acme's keys after forget: %+v %v", rows, err)
		}
		_, e3 := openSealed(t, db, newOnly)
		if _, err := e3.Open(ctx, "idem_outbox", "acme", "m1", sealed["acme"]); !errors.Is(err, seal.ErrForgotten) {
			t.Fatalf("acme after forget: %v", err)
		}
		if _, err := e3.Open(ctx, "idem_outbox", "globex", "m1", sealed["globex"]); err != nil {
			t.Fatalf("globex after acme's forget: %v", err)
		}
		out, stderr, code = runIdem(t, nil, "tenants", "forget", "acme", "--db", db)
		if code != 1 || !strings.Contains(stderr, `already forgotten: tenant "acme", at `) {
			t.Fatalf("forget twice (%d): %s%s", code, out, stderr)
		}
		out, stderr, code = runIdem(t, nil, "tenants", "forget", "--db", db, "nobody")
		if code != 1 || !strings.Contains(stderr, `has no data key: tenant "nobody"`) {
			t.Fatalf("unknown tenant (%d): %s%s", code, out, stderr)
		}
	})
}
