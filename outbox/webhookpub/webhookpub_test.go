package webhookpub_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

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
