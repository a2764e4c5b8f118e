package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAPIKeyErrorsNeverShowTheKey: an API-key entry of any wrong shape is
// refused by an error naming its position, through the environment, the
// flag and a configuration file alike, and no part of the secret is in
// the message (which is printed at start-up, into the logs).
func TestAPIKeyErrorsNeverShowTheKey(t *testing.T) {
	t.Parallel()
	const secret = "sk_live_4eC39HqLyjWDarjtT1zdp7dc" // also a valid tenant name
	const good = "acme:acme-key-0123456789abcdef"
	cases := []struct {
		name, value, want string
	}{
		{"tenant=key", good + ",globex=" + secret, "API key entry 2: want tenant:key"},
		{"the key alone", secret, "API key entry 1: want tenant:key"},
		{"a space in the tenant", "glo bex:" + secret, "API key entry 1: want tenant:key"},
		{"key:tenant", secret + ":globex", "API key entry 1: the key is shorter than"},
		{"key:tenant with a long tenant", good + "," + secret + ":sha256:" + secret, "API key entry 2: sha256: wants 64 hex digits"},
		{"a tenant too long", strings.Repeat(secret, 3) + ":" + secret, "API key entry 1: want tenant:key"},
		{"the same key twice", "acme:" + secret + ",globex:" + secret, "API key entry 2: the same key as entry 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(t.TempDir(), "idem.yaml")
			if err := os.WriteFile(file, []byte("api_keys: \""+c.value+"\"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			for how, load := range map[string]func() error{
				"env": func() error {
					_, err := Load("serve", nil, env(map[string]string{"IDEM_API_KEYS": c.value}), ServeSettings...)
					return err
				},
				"flag": func() error {
					_, err := Load("serve", []string{"--api-keys", c.value}, env(nil), ServeSettings...)
					return err
				},
				"file": func() error {
					_, err := Load("serve", nil, env(map[string]string{"IDEM_CONFIG": file}), ServeSettings...)
					return err
				},
			} {
				err := load()
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("%s: err %v, want %q", how, err, c.want)
				}
				for _, part := range []string{secret, secret[:12], secret[len(secret)-12:]} {
					if strings.Contains(err.Error(), part) {
						t.Fatalf("%s: the error shows the key: %v", how, err)
					}
				}
			}
		})
	}
}
