package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
)

// SessionCookie names the cookie the login form sets.
const SessionCookie = "idem_console"

// maxFormBytes bounds a console form post: a login, a logout, a redrive.
const maxFormBytes = 16 << 10

// principal is who a request acts as, for the CSRF token: a session's nonce,
// a Bearer caller, or a loopback user without an admin key.
type principalKey struct{}

func principalFrom(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

func isLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authed lets a request through when no admin key is configured (guard has
// already checked loopback), when it bears the admin key, or when it carries
// a valid session; otherwise it answers 401 with the login form.
func (c *Console) authed(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.cfg.AdminKeyHash == nil {
			next(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, "loopback")))
			return
		}
		if token, ok := bearer(r); ok {
			if c.limited(w, r, "bearer") {
				return
			}
			if !c.keyMatches(token) {
				c.failed(r, "bearer")
				w.Header().Set("WWW-Authenticate", `Bearer realm="idem console", error="invalid_token"`)
				c.renderLogin(w, r, http.StatusUnauthorized, "That admin key is not valid.")
				return
			}
			next(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, "bearer")))
			return
		}
		if ck, err := r.Cookie(SessionCookie); err == nil {
			if nonce, ok := c.checkSession(ck.Value); ok {
				next(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, "session:"+nonce)))
				return
			}
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="idem console"`)
		c.renderLogin(w, r, http.StatusUnauthorized, "")
	})
}

// limited answers 429 when the request's address has failed to log in too
// often lately (see loginLimiter), without looking at the key it brings.
func (c *Console) limited(w http.ResponseWriter, r *http.Request, via string) bool {
	addr := clientAddr(r)
	wait := c.limiter.wait(addr, c.cfg.Clock())
	if wait <= 0 {
		return false
	}
	secs := int64((wait + time.Second - 1) / time.Second)
	c.cfg.Logger.Warn("console: login refused: too many failed logins from this address",
		"addr", addr, "via", via, "retry_after_s", secs)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	c.renderLogin(w, r, http.StatusTooManyRequests,
		"Too many failed logins from your address. Try again in "+strconv.FormatInt(secs, 10)+" seconds.")
	return true
}

// failed counts and logs a wrong admin key. The log names the address,
// never the key: a mistyped key is most of a real one.
func (c *Console) failed(r *http.Request, via string) {
	addr := clientAddr(r)
	c.limiter.fail(addr, c.cfg.Clock())
	c.cfg.Logger.Warn("console: login failed: wrong admin key", "addr", addr, "via", via)
}

// keyMatches compares the presented key's hash with the admin key's in
// constant time: the comparison's timing says nothing about the key.
func (c *Console) keyMatches(key string) bool {
	sum := sha256.Sum256([]byte(key))
	return subtle.ConstantTimeCompare(sum[:], c.cfg.AdminKeyHash[:]) == 1
}

func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", false
	}
	return strings.TrimSpace(token), true
}

func (c *Console) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, c.secret[:])
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

var b64 = base64.RawURLEncoding

// newSession returns a session token: "v1.EXPIRY.NONCE.MAC". It names no key
// and holds nothing secret; the MAC makes it unforgeable without the
// console's secret, and EXPIRY bounds it. The session is live until it
// expires or its operator logs out (sessionStore).
func (c *Console) newSession() (string, time.Time, error) {
	var n [16]byte
	if _, err := rand.Read(n[:]); err != nil {
		return "", time.Time{}, err
	}
	nonce := b64.EncodeToString(n[:])
	now := c.cfg.Clock()
	expires := now.Add(c.cfg.SessionTTL)
	exp := strconv.FormatInt(expires.Unix(), 10)
	c.sessions.add(nonce, time.Unix(expires.Unix(), 0), now)
	return "v1." + exp + "." + nonce + "." + b64.EncodeToString(c.mac("session", exp, nonce)), expires, nil
}

func (c *Console) checkSession(token string) (nonce string, ok bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 4 || parts[0] != "v1" {
		return "", false
	}
	sig, err := b64.DecodeString(parts[3])
	if err != nil || !hmac.Equal(sig, c.mac("session", parts[1], parts[2])) {
		return "", false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	now := c.cfg.Clock()
	if err != nil || !now.Before(time.Unix(exp, 0)) || !c.sessions.live(parts[2], now) {
		return "", false
	}
	return parts[2], true
}

// csrfToken is the token state-changing forms carry: bound to the principal,
// so a token read from one session is worthless in another, and unknowable to
// another site, which can make a browser post but cannot read the page.
func (c *Console) csrfToken(r *http.Request) string {
	return b64.EncodeToString(c.mac("csrf", principalFrom(r.Context())))
}

// csrf refuses a form post without the principal's CSRF token.
func (c *Console) csrf(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			c.message(w, r, http.StatusBadRequest, "Bad request", "The form could not be read.")
			return
		}
		got, err := b64.DecodeString(r.PostForm.Get("csrf"))
		if err != nil || !hmac.Equal(got, c.mac("csrf", principalFrom(r.Context()))) {
			c.message(w, r, http.StatusForbidden, "Forbidden",
				"The form's security token is missing or stale. Reload the page and try again.")
			return
		}
		next(w, r)
	}
}

func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	c.renderLogin(w, r, http.StatusOK, "")
}

func (c *Console) renderLogin(w http.ResponseWriter, r *http.Request, status int, problem string) {
	next := r.URL.Query().Get("next")
	if v := r.PostForm.Get("next"); v != "" {
		next = v // a refused login post keeps where it was going
	}
	if r.URL.Path != "/ui/login" {
		next = r.URL.RequestURI()
	}
	c.render(w, r, status, "login", map[string]any{
		"Next":     safeNext(next),
		"Problem":  problem,
		"NoKey":    c.cfg.AdminKeyHash == nil,
		"LoggedIn": false,
	})
}

// safeNext keeps a post-login redirect inside the console, so the login form
// cannot be used to send an operator elsewhere: next must be a path under
// /ui/ once cleaned (so /ui/../x, which a browser would resolve to /x, is
// refused), with neither a scheme nor a host, no "//", no backslash (which
// browsers read as a slash) and no control character, raw or
// percent-encoded. Anything else is /ui/. The answer is rebuilt from the
// cleaned path and the query, so it is what the redirect sends.
func safeNext(next string) string {
	if next == "" || len(next) > maxParamBytes || hasControlOrBackslash(next) {
		return Prefix
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Opaque != "" || u.User != nil || u.Host != "" ||
		strings.Contains(u.Path, "//") || hasControlOrBackslash(u.Path) {
		return Prefix
	}
	q, err := url.QueryUnescape(u.RawQuery)
	if err != nil || hasControlOrBackslash(q) {
		return Prefix
	}
	clean := path.Clean(u.Path)
	if strings.HasSuffix(u.Path, "/") && clean != "/" {
		clean += "/"
	}
	if !strings.HasPrefix(clean, Prefix) {
		return Prefix
	}
	out := &url.URL{Path: clean, RawQuery: u.RawQuery}
	if clean == u.Path {
		out.RawPath = u.RawPath // keeps an escaped "/" in an id escaped
	}
	return out.String()
}

func hasControlOrBackslash(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' })
}

// secureCookie: the session cookie is always Secure. A session exists
// only with an admin key, which is what lets the console answer other
// machines; such a console belongs behind TLS, often a proxy's that the
// service does not see (r.TLS is nil there), and the cookie must never
// travel in clear. Browsers keep a Secure cookie of http://localhost and
// loopback addresses, so a local console still logs in.
const secureCookie = true

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if c.cfg.AdminKeyHash == nil {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		c.message(w, r, http.StatusBadRequest, "Bad request", "The form could not be read.")
		return
	}
	if c.limited(w, r, "form") {
		return
	}
	if !c.keyMatches(r.PostForm.Get("key")) {
		c.failed(r, "form")
		c.render(w, r, http.StatusUnauthorized, "login", map[string]any{
			"Next": safeNext(r.PostForm.Get("next")), "Problem": "That admin key is not valid.",
		})
		return
	}
	token, expires, err := c.newSession()
	if err != nil {
		c.fail(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name:     SessionCookie,
		Value:    token,
		Path:     Prefix,
		Expires:  expires,
		HttpOnly: true,
		Secure:   secureCookie,
		SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, safeNext(r.PostForm.Get("next")), http.StatusSeeOther)
}

// logout ends the session on the server, so its cookie is worthless even
// to whoever copied it, and asks the browser to drop it.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if nonce, ok := strings.CutPrefix(principalFrom(r.Context()), "session:"); ok {
		c.sessions.end(nonce)
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: Prefix, MaxAge: -1,
		HttpOnly: true, Secure: secureCookie, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}
