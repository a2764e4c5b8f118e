package server

import (
	"mime"
	"net/http"
	"strings"

	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/problem"
)

// protect wraps every route. Every answer — first arrival, replay,
// problem, console page — is marked not to be cached (it is one tenant's
// money) and not to be sniffed as another type.
//
// Without API keys anyone who reaches the listener acts as tenant
// "default", and only the loopback listener keeps strangers out. A web
// page can get past it by DNS rebinding: its own name, evil.example, is
// made to resolve to 127.0.0.1, and the browser, which believes it talks
// to evil.example, lets the page read and write the service. Such a
// request still names evil.example in its Host header, so in this mode a
// request must name this machine (config.IsLoopbackHost) or it is answered
// 421 and goes no further. Two routes stay open to any name: /healthz says
// nothing, and a webhook delivery is authenticated by its provider's
// signature, which no web page can make (a tunnel such as `stripe listen`
// or ngrok may forward it under its own public name).
func (s *Server) protect(next http.Handler) http.Handler {
	loopbackOnly := len(s.tenants) == 0
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Cache-Control"], h["X-Content-Type-Options"] = noStore, noSniff
		if loopbackOnly && !anyHost(r) && !config.IsLoopbackHost(r.Host) {
			s.log.Warn("idem: refused a request for a host name that is not this machine's (no API keys: loopback names only)",
				"host", clip(r.Host, 255), "method", r.Method, "path", clip(r.URL.Path, 255), "remote", r.RemoteAddr)
			problem.Write(w, http.StatusMisdirectedRequest, codeMisdirected,
				"without API keys this service answers only requests for localhost, 127.0.0.1 or [::1]; configure API keys to serve other names")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// anyHost reports whether r's route answers whatever host it names.
func anyHost(r *http.Request) bool {
	return r.URL.Path == "/healthz" || r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/webhooks/")
}

// jsonBody refuses a write whose body is declared as anything but JSON,
// before the Idempotency-Key is claimed: nothing is stored for it. The
// body is always read as JSON whatever it is declared as; the media types
// let through are JSON's, none at all, and
// application/x-www-form-urlencoded, which curl -d sends when no type is
// given. text/plain and multipart/form-data are refused: with
// urlencoded they are the types a page on another site may post without
// asking the service first, and unlike urlencoded no JSON client sends
// them by default.
func jsonBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); ct != "" && !jsonMediaType(ct) {
			problem.Write(w, http.StatusUnsupportedMediaType, codeUnsupportedMediaType,
				"the body must be JSON: send Content-Type: application/json")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// keylessWrite guards the writes that run without an Idempotency-Key under
// --idempotency-key=optional. A key, like an API key, is a header a page of
// another site can set only after the browser asked the service (a CORS
// preflight, which the service never grants); a keyless write without API
// keys needs no such header, so a page could post a form to a loopback
// instance and move money as tenant "default". So a keyless write must
// declare application/json (a type a page cannot post without asking
// first) and must not come from another origin (Sec-Fetch-Site, else
// Origin against Host, as http.CrossOriginProtection checks). Clients that
// are not browsers send neither header and are unaffected. Nothing is read
// or stored for a refused request.
func (s *Server) keylessWrite(next http.Handler) http.Handler {
	if !s.keyOptional() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.Header.Values(idemhttp.HeaderKey)) > 0 {
			next.ServeHTTP(w, r)
			return
		}
		if !strictJSONMediaType(r.Header.Get("Content-Type")) {
			problem.Write(w, http.StatusUnsupportedMediaType, codeUnsupportedMediaType,
				"a write without an Idempotency-Key must send Content-Type: application/json")
			return
		}
		if err := s.crossOrigin.Check(r); err != nil {
			s.log.Warn("idem: refused a keyless cross-origin write",
				"origin", clip(r.Header.Get("Origin"), 255), "sec_fetch_site", clip(r.Header.Get("Sec-Fetch-Site"), 32),
				"method", r.Method, "path", clip(r.URL.Path, 255), "remote", r.RemoteAddr)
			problem.Write(w, http.StatusForbidden, codeCrossOrigin,
				"a write without an Idempotency-Key is refused from another site's page")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// strictJSONMediaType accepts application/json and application/*+json only.
func strictJSONMediaType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" ||
		strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

func jsonMediaType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "application/x-www-form-urlencoded" ||
		strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}

// clip bounds a client's string before it is logged.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Every answer's header values, shared: a header's value slice is replaced
// by Set and copied by Add (its capacity is its length), never written in
// place, and sharing them saves an allocation each a request.
var noStore, noSniff = []string{"no-store"}, []string{"nosniff"}
