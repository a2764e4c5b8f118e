package tracing

import (
	"strings"
	"testing"
)

func TestBoundState(t *testing.T) {
	t.Parallel()
	member := func(key string, n int) string { return key + "=" + strings.Repeat("x", n-len(key)-1) }
	long := member("long", 200)
	var many []string
	for i := range 40 {
		many = append(many, member("m"+string(rune('a'+i%26))+string(rune('a'+i/26)), 8))
	}
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"within the bounds, unchanged", "a=1,b=2", "a=1,b=2"},
		{"more than 32 members: the first 32", strings.Join(many, ","), strings.Join(many[:32], ",")},
		{"long members go first", strings.Join([]string{member("a", 100), long, member("b", 100), long, member("c", 100), long}, ","),
			strings.Join([]string{member("a", 100), member("b", 100), member("c", 100)}, ",")},
		{"then from the end", strings.Join([]string{member("a", 120), member("b", 120), member("c", 120), member("d", 120), member("e", 120)}, ","),
			strings.Join([]string{member("a", 120), member("b", 120), member("c", 120), member("d", 120)}, ",")},
		{"one member too long alone", member("a", 600), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := BoundState(tc.in)
			if got != tc.want {
				t.Fatalf("BoundState: %d bytes %.80q…, want %d bytes %.80q…", len(got), got, len(tc.want), tc.want)
			}
			if len(got) > MaxStateBytes || strings.Count(got, ",") >= MaxStateMembers {
				t.Fatalf("out of bounds: %d bytes", len(got))
			}
		})
	}
}
