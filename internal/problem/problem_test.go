package problem_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemhq/idem/internal/problem"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status       int
		code, detail string
	}{
		{http.StatusBadRequest, "idempotency_key_missing", "this request needs an Idempotency-Key header"},
		{http.StatusConflict, "request_in_flight", ""},
		{http.StatusUnprocessableEntity, "insufficient_funds", `quotes " and <html> stay text`},
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			w := httptest.NewRecorder()
			w.Header().Set("Retry-After", "1")
			problem.Write(w, tc.status, tc.code, tc.detail)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d", w.Code, tc.status)
			}
			h := w.Header()
			if h.Get("Content-Type") != "application/problem+json" || h.Get("Retry-After") != "1" || h.Get("Cache-Control") != "no-store" {
				t.Fatalf("headers %v", h)
			}
			var got map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			want := map[string]any{"type": "about:blank", "title": http.StatusText(tc.status), "status": float64(tc.status), "code": tc.code}
			if tc.detail != "" {
				want["detail"] = tc.detail
			}
			if len(got) != len(want) {
				t.Fatalf("members %v, want %v", got, want)
			}
			for k, v := range want {
				if got[k] != v {
					t.Fatalf("member %s = %v, want %v", k, got[k], v)
				}
			}
		})
	}
}
