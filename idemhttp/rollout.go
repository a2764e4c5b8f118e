package idemhttp

import (
	"bytes"
	"io"
	"net/http"

	"github.com/idemhq/idem/internal/opcount"
)

// KindUnguarded: under Config.AllowMissingKey, a request without a key ran
// the handler unguarded (no claim, nothing stored, Tx nil).
const KindUnguarded Kind = "unguarded"

// MaxUnguardedOperations bounds the operations Unguarded counts apart;
// the requests of any further operation are counted under "_other".
const MaxUnguardedOperations = 256

// Unguarded returns, per operation (Config.Operation), how many requests
// ran unguarded because they came without a key under
// Config.AllowMissingKey: when it stops growing for an operation, every
// client of it sends keys, and the key can be required. At most
// MaxUnguardedOperations operations are kept apart, the rest counted as
// "_other".
func (m *Middleware) Unguarded() map[string]uint64 { return m.unguarded.Snapshot() }

// passUnguarded runs a request that came without a key under
// Config.AllowMissingKey, and reports it; it returns false when the
// request has a key or the setting is off. Its body is read within
// MaxBodyBytes first, as a guarded request's is: a keyless request is no
// way around the limit.
func (m *Middleware) passUnguarded(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
	if !m.cfg.AllowMissingKey || len(r.Header.Values(HeaderKey)) > 0 {
		return false
	}
	body, ok := m.readBody(w, r)
	if !ok {
		return true
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	m.unguarded.Add(m.cfg.Operation(r))
	m.report(r, KindUnguarded)
	next.ServeHTTP(w, r)
	return true
}

func newUnguardedCounter() *opcount.Counter { return opcount.New(MaxUnguardedOperations) }
