package broker

import (
	"context"
	"strings"
	"testing"
)

// Redact hides every host's credentials and the query values that are not
// known options, whatever the scheme, even in a URL that does not parse.
func TestRedact(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"nats://h1:4222", "nats://h1:4222"},
		{"nats://alice:secret@h1:1,alice:secret@h2:2?stream=S&creds=/c.creds",
			"nats://…@h1:1,…@h2:2?stream=S&creds=/c.creds"},
		{"nats://secret@h1:1", "nats://…@h1:1"},
		{"tls://h1:1,tls://secret@h2:2?tls_ca=/ca.pem", "tls://h1:1,tls://…@h2:2?tls_ca=/ca.pem"},
		{"kafka://alice:secret@b1:9092?sasl=plain&password=secret", "kafka://…@b1:9092?sasl=plain&password=…"},
		{"https://alice:secret@hooks.example/in?token=secret&x", "https://…@hooks.example/…?token=…&x"},
		{"https://hooks.example/services/T0/B0/secret", "https://hooks.example/…"},
		{"HTTP://hooks.example/", "HTTP://hooks.example/"},
		{"nats://u:se/cret@h:1", "nats://…@h:1"},
		{"stdout", "stdout"},
		{"", ""},
	} {
		got := Redact(c.in)
		if got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
		if strings.Contains(got, "secret") || strings.Contains(got, "cret") {
			t.Errorf("Redact(%q) shows the secret: %q", c.in, got)
		}
	}
}

// A URL of no known kind is refused with its secrets hidden.
func TestOpenUnknownScheme(t *testing.T) {
	t.Parallel()
	_, err := Open(context.Background(), "mqtt://alice:secret@mq:1883?token=secret", Config{})
	if err == nil || !strings.Contains(err.Error(), "mqtt://…@mq:1883?token=…") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("%v", err)
	}
}
