package server

import (
	"strings"
	"testing"

	"github.com/google/uuid"
)

// derivedUUID names what uuid.NewSHA1 names, for names that fit its
// buffer and names that do not.
func TestDerivedUUID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ kind, scope, key string }{
		{"transfer", "default", "first-1"},
		{"account", "", ""},
		{"reversal", "tenant-a", "k\x00ey"},
		{"transfer", strings.Repeat("s", 200), strings.Repeat("k", 255)},
		{"transfer", strings.Repeat("s", 300), strings.Repeat("k", 300)},
	} {
		want := uuid.NewSHA1(idNamespace, []byte(tc.kind+"\x00"+tc.scope+"\x00"+tc.key))
		if got := derivedUUID(tc.kind, tc.scope, tc.key); got != want {
			t.Errorf("derivedUUID(%q, %d-byte scope, %d-byte key) = %s, want %s", tc.kind, len(tc.scope), len(tc.key), got, want)
		}
	}
}
