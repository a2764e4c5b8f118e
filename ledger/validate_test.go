package ledger

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzIDIsAPathSegment: an id checkID accepts comes back whole from a
// ServeMux route that names it in the URL path, as the HTTP service's
// GET /v1/accounts/{id} and POST /v1/transfers/{id}/reversals do: no
// cleaning redirect, no escaping, nothing lost.
func FuzzIDIsAPathSegment(f *testing.F) {
	for _, id := range []string{"a", ".", "..", "...", ".a", "a.", "a..b", "~", ":", "a:b", "-_.:~", "%2e", "a/b"} {
		f.Add(id)
	}
	mux := http.NewServeMux()
	for _, pattern := range []string{"GET /v1/accounts/{id}", "POST /v1/transfers/{id}/reversals"} {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(r.PathValue("id")))
		})
	}
	f.Fuzz(func(t *testing.T, id string) {
		if checkID("id", id) != nil {
			return
		}
		for _, target := range []struct{ method, path string }{
			{"GET", "/v1/accounts/" + id},
			{"POST", "/v1/transfers/" + id + "/reversals"},
		} {
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, httptest.NewRequest(target.method, target.path, nil))
			if w.Code != http.StatusOK || w.Body.String() != id {
				t.Fatalf("id %q accepted, but %s %s answers %d with id %q", id, target.method, target.path, w.Code, w.Body)
			}
		}
	})
}
