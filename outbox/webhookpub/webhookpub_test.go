package webhookpub_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/outboxtest"
	"github.com/idemhq/idem/outbox/webhookpub"
)

// receiver verifies each delivery's Standard Webhooks signature itself
// (from the spec, not with the publisher's Sign) and keeps the good ones.
type receiver struct {
	key []byte
	mu  sync.Mutex
	got []outboxtest.Received
	bad int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	want := "v1," + base64.StdEncoding.EncodeToString(hmacSHA256(rc.key, []byte(id+"."+ts+"."+string(body))))
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute || r.Header.Get("webhook-signature") != want {
		rc.bad++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var env struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	rc.got = append(rc.got, outboxtest.Received{ID: id, Type: env.Type, Payload: env.Data})
	w.WriteHeader(http.StatusNoContent)
}

func TestConformance(t *testing.T) {
	outboxtest.Run(t, func(t *testing.T) outboxtest.Harness {
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		rc := &receiver{key: key}
		srv := httptest.NewServer(rc)
		t.Cleanup(srv.Close)
		p, err := webhookpub.New(webhookpub.Config{URL: srv.URL, Secret: webhookpub.SecretPrefix + base64.StdEncoding.EncodeToString(key)})
		if err != nil {
			t.Fatal(err)
		}
		return outboxtest.Harness{Publisher: p, Received: func(t *testing.T) []outboxtest.Received {
			rc.mu.Lock()
			defer rc.mu.Unlock()
			if rc.bad > 0 {
				t.Fatalf("%d deliveries failed signature checks", rc.bad)
			}
			return append([]outboxtest.Received(nil), rc.got...)
		}}
	})
}

func TestSecretChecked(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "whsec_", "nope", "whsec_" + base64.StdEncoding.EncodeToString([]byte("short"))} {
		if _, err := webhookpub.New(webhookpub.Config{URL: "http://127.0.0.1:1", Secret: s}); err == nil {
			t.Errorf("secret %q accepted", s)
		}
	}
}

// New takes only an absolute http(s) URL, and its refusal does not echo
// the URL back.
func TestURLChecked(t *testing.T) {
	t.Parallel()
	secret := webhookpub.SecretPrefix + base64.StdEncoding.EncodeToString(make([]byte, 32))
	for _, u := range []string{"", "ftp://host/hook", "/hook?token=s3cret", "https://", "http://user:s3cret@host:port/hook", "mailto:s3cret@host"} {
		_, err := webhookpub.New(webhookpub.Config{URL: u, Secret: secret})
		if err == nil {
			t.Errorf("URL %q accepted", u)
		} else if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("URL %q: error %q repeats it", u, err)
		}
	}
	if _, err := webhookpub.New(webhookpub.Config{URL: "HTTPS://host/hook?token=t", Secret: secret}); err != nil {
		t.Errorf("an https URL with an upper-case scheme: %v", err)
	}
}

// A delivery's error names the receiver by its scheme and host, without
// the path, query or credentials of its URL, where webhook URLs carry
// their token: the relay logs the error and keeps it on the outbox row,
// which the console shows for a dead letter.
func TestErrorsKeepTheURLsSecrets(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, _ := strconv.Atoi(r.URL.Query().Get("status"))
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close() // nothing listens there now
	secret := webhookpub.SecretPrefix + base64.StdEncoding.EncodeToString(make([]byte, 32))
	userinfo := func(u string) string { return "http://hook-user:pw-s3cret@" + u[len("http://"):] }
	host := map[bool]string{false: srv.URL, true: closed.URL}
	for name, url := range map[string]string{
		"refused":     srv.URL + "/hook?status=400&token=tok-s3cret",
		"unavailable": srv.URL + "/hook?status=503&token=tok-s3cret",
		"credentials": userinfo(srv.URL) + "/hook?status=400",
		"path":        srv.URL + "/services/T0/B0/path-s3cret?status=400",
		"unreachable": userinfo(closed.URL) + "/services/path-s3cret?token=tok-s3cret",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, err := webhookpub.New(webhookpub.Config{URL: url, Secret: secret, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			errs := p.Publish(t.Context(), []outbox.Message{{ID: "m1", Type: "t", Payload: []byte(`{}`)}})
			if errs[0] == nil {
				t.Fatal("delivered")
			}
			msg := errs[0].Error()
			if strings.Contains(msg, "s3cret") || !strings.Contains(msg, host[name == "unreachable"]) {
				t.Errorf("error %q: want the receiver's scheme and host, nothing of its path, query or credentials", msg)
			}
			if got := p.Destination(outbox.Message{}); got != host[name == "unreachable"] {
				t.Errorf("Destination() = %q, want %q", got, host[name == "unreachable"])
			}
		})
	}
}

// A receiver that redirects is not followed, whatever the client's own
// CheckRedirect: the signed delivery goes nowhere but the configured URL,
// and the 3xx is a failed delivery (an error, not an outage).
func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	reached := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reached[r.Method+" "+r.URL.Path]++
		mu.Unlock()
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "/temporary":
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(srv.Close)
	secret := webhookpub.SecretPrefix + base64.StdEncoding.EncodeToString(make([]byte, 32))
	for _, path := range []string{"/moved", "/temporary"} {
		for _, client := range []*http.Client{nil, {}} { // the default client, and one that would follow
			p, err := webhookpub.New(webhookpub.Config{URL: srv.URL + path, Secret: secret, Client: client})
			if err != nil {
				t.Fatal(err)
			}
			errs := p.Publish(t.Context(), []outbox.Message{{ID: "m1", Type: "t", Payload: []byte(`{}`)}})
			if errs[0] == nil || errors.Is(errs[0], outbox.ErrBrokerUnavailable) || !strings.Contains(errs[0].Error(), "redirect") {
				t.Errorf("%s: %v, want a failed delivery naming the redirect", path, errs[0])
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if reached["POST /moved"] != 2 || reached["POST /temporary"] != 2 || reached["GET /elsewhere"]+reached["POST /elsewhere"] != 0 {
		t.Fatalf("requests %v: want each URL posted twice and the redirect's target never", reached)
	}
}
