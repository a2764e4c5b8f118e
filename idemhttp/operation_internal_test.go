package idemhttp

import (
	"net/http"
	"strings"
	"testing"
)

// defaultOperation answers what the method, a space and the pattern
// without its method spell, whether it returns the pattern itself or
// builds the string.
func TestDefaultOperation(t *testing.T) {
	t.Parallel()
	byDefinition := func(r *http.Request) string {
		p := r.Pattern
		if p == "" {
			return r.Method + " " + r.URL.Path
		}
		if i := strings.IndexAny(p, " \t"); i >= 0 && !strings.Contains(p[:i], "/") {
			p = strings.TrimLeft(p[i:], " \t")
		}
		return r.Method + " " + p
	}
	for _, method := range []string{http.MethodPost, http.MethodPatch} {
		for _, pattern := range []string{"", "/x", "POST /v1/transfers", "PATCH /v1/x/{id}", "POST  /two-spaces",
			"POST\t/tab", "POST example.com/x", "/a b", "POST /a b", "POSTX /x", "POS /x"} {
			r, _ := http.NewRequest(method, "http://h/v1/path", nil)
			r.Pattern = pattern
			if got, want := defaultOperation(r), byDefinition(r); got != want {
				t.Errorf("%s under %q: %q, want %q", method, pattern, got, want)
			}
		}
	}
}
