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
			if !c.keyMatches(token) {
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
// console's secret, and EXPIRY bounds it.
func (c *Console) newSession() (string, time.Time, error) {
	var n [16]byte
	if _, err := rand.Read(n[:]); err != nil {
		return "", time.Time{}, err
	}
	nonce := b64.EncodeToString(n[:])
	expires := c.cfg.Clock().Add(c.cfg.SessionTTL)
	exp := strconv.FormatInt(expires.Unix(), 10)
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
	if err != nil || !c.cfg.Clock().Before(time.Unix(exp, 0)) {
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
// cannot be used to send an operator elsewhere.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return Prefix
	}
	return next
}

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
	if !c.keyMatches(r.PostForm.Get("key")) {
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
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, safeNext(r.PostForm.Get("next")), http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: Prefix, MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}
