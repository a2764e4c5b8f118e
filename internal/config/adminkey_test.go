package config

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func TestAdminKey(t *testing.T) {
	t.Parallel()
	raw := "console-0123456789abcdef"
	sum := sha256.Sum256([]byte(raw))
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want *[sha256.Size]byte
		err  string
	}{
		{"none", nil, nil, nil, ""},
		{"env", map[string]string{"IDEM_ADMIN_KEY": raw}, nil, &sum, ""},
		{"flag, pre-hashed", nil, []string{"--admin-key", "sha256:" + hex.EncodeToString(sum[:])}, &sum, ""},
		{"short", map[string]string{"IDEM_ADMIN_KEY": "short"}, nil, nil, "shorter than"},
		{"bad hash", nil, []string{"--admin-key", "sha256:beef"}, nil, "64 hex"},
		{"an API key", map[string]string{"IDEM_ADMIN_KEY": raw, "IDEM_API_KEYS": "acme:" + raw}, nil, nil, "tenant \"acme\"'s API key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Load("serve", c.args, env(c.env), ServeSettings...)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				if strings.Contains(err.Error(), raw) {
					t.Fatalf("the error leaks the key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (cfg.AdminKeyHash == nil) != (c.want == nil) || (c.want != nil && *cfg.AdminKeyHash != *c.want) {
				t.Fatalf("admin key hash %v, want %v", cfg.AdminKeyHash, c.want)
			}
		})
	}
}
