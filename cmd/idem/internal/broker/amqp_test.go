package broker

import (
	"context"
	"fmt"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemhq/idem/internal/testrabbit"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/cloudevent"
)

// amqp:// URLs: the client's URL keeps the credentials, host and vhost and
// loses idem's options; routes, format and TLS are read; malformed ones
// are refused without showing the password.
func TestParseAMQP(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in, url, exchange, template string
		table                       map[string]string
		format                      cloudevent.Format
		tls, noDeclare              bool
		err                         string
	}{
		{in: "amqp://127.0.0.1:5672", url: "amqp://127.0.0.1:5672"},
		{in: "amqp://u:secret@h:5672/prod?exchange=events&declare=false&format=cloudevents",
			url: "amqp://u:secret@h:5672/prod", exchange: "events", noDeclare: true, format: cloudevent.Binary},
		{in: "amqps://h?tls_ca=/ca.pem&route={type}&route.order.created=orders",
			url: "amqps://h", tls: true, template: "{type}", table: map[string]string{"order.created": "orders"}},
		{in: "amqp://u@h?password_file=/pw", url: "amqp://u@h"},
		{in: "amqp://h?tls_ca=/ca.pem", err: "amqps://"},
		{in: "amqp://h?exchnage=x", err: `unknown RabbitMQ option "exchnage"`},
		{in: "amqp://h?format=xml", err: "format"},
		{in: "amqp://h?route.a=", err: "route.a"},
		{in: "amqp://h?route=", err: "template"},
		{in: "amqp://h?declare=maybe", err: "declare"},
		{in: "amqp://h?password_file=/pw", err: "user name"},
		{in: "amqp://u:secret@h?password_file=/pw", err: "user name"},
		{in: "nats://h:1", err: "amqp:// or amqps://"},
	} {
		a, err := ParseAMQP(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want %q", c.in, err, c.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: error shows the password: %v", c.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		cfg := a.Config
		if a.URL != c.url || cfg.Exchange != c.exchange || cfg.NoDeclare != c.noDeclare || a.TLS.Enabled != c.tls ||
			cfg.Routes.Template != c.template || len(cfg.Routes.Table) != len(c.table) || cfg.CloudEvents.Format != c.format {
			t.Errorf("%s: %+v", c.in, a)
		}
		for k, v := range c.table {
			if cfg.Routes.Table[k] != v {
				t.Errorf("%s: route %s = %q, want %q", c.in, k, cfg.Routes.Table[k], v)
			}
		}
	}
	if got := Redact("amqp://u:secret@h:5672/v?exchange=x&route.a.b=k"); strings.Contains(got, "secret") || !strings.Contains(got, "route.a.b=k") {
		t.Errorf("Redact: %s", got)
	}
}

// Routes and format reach the NATS and Kafka publishers' configuration
// from their URLs too.
func TestParseRoutesAndFormat(t *testing.T) {
	t.Parallel()
	n, err := ParseNATS("nats://h:4222?route={type}&route.a.b=x.y&format=both&ce_source=/shop")
	if err != nil {
		t.Fatal(err)
	}
	if n.Config.Routes.Template != "{type}" || n.Config.Routes.Table["a.b"] != "x.y" ||
		n.Config.CloudEvents.Format != cloudevent.Both || n.Config.CloudEvents.Source != "/shop" {
		t.Fatalf("NATS: %+v", n.Config)
	}
	k, err := ParseKafka("kafka://h:9092?route.order.created=orders&format=cloudevents-structured")
	if err != nil {
		t.Fatal(err)
	}
	if k.Routes.Template != "" || k.Routes.Table["order.created"] != "orders" || k.CloudEvents.Format != cloudevent.Structured {
		t.Fatalf("Kafka: %+v", k)
	}
	for _, bad := range []string{"kafka://h:9092?format=avro", "nats://h:4222?route.x=", "kafka://h:9092?rout.x=y"} {
		if _, err := Open(t.Context(), bad, Config{}); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// idem relay --publish amqps://USER@127.0.0.1:PORT/?tls_ca=…&password_file=…
// against a real RabbitMQ node with a TLS listener whose certificate the
// test's CA signed: the publisher trusts it through tls_ca, logs in with
// the password from the file, and the event reaches the queue with its
// outbox id as message-id. A CA that did not sign the node's certificate
// is refused at open, saying so, without the password.
func TestOpenAMQPS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "rabbit")
	certFile, keyFile, _ := ca.issue(t, "rabbit-server", true)
	node := testrabbit.StartTLS(t, testrabbit.TLSFiles{CertFile: certFile, KeyFile: keyFile, CAFile: ca.CAFile})
	u, err := amqp.ParseURI(node.TLSURL)
	if err != nil {
		t.Fatal(err)
	}
	const x = "idem-amqps"
	q := node.Queue(t, x, "#")
	pw := writeFile(t, "password", u.Password+"\n")
	base := fmt.Sprintf("amqps://%s@%s:%d/", u.Username, u.Host, u.Port)
	ctx := context.Background()

	p, err := Open(ctx, base+"?tls_ca="+ca.CAFile+"&password_file="+pw+"&exchange="+x, Config{})
	if err != nil {
		t.Fatal(err)
	}
	id := outbox.NewID()
	publishOne(t, p, id)
	got := q.Messages(t)
	if len(got) != 1 || got[0].MessageId != id || got[0].Type != "a.b" || string(got[0].Body) != "{}" {
		t.Fatalf("queue holds %+v, want the one event %s", got, id)
	}

	other := newTestCA(t, "other")
	_, err = Open(ctx, base+"?tls_ca="+other.CAFile+"&password_file="+pw+"&exchange="+x, Config{})
	if err == nil {
		t.Fatal("a CA that did not sign the node's certificate was trusted")
	}
	msg := err.Error()
	if !strings.Contains(msg, "RabbitMQ") || !strings.Contains(msg, fmt.Sprint(u.Port)) ||
		!strings.Contains(msg, "certificate signed by unknown authority") || strings.Contains(msg, u.Password) {
		t.Fatalf("wrong CA: %v", err)
	}
	if got := q.Messages(t); len(got) != 1 {
		t.Fatalf("queue holds %d messages after the refused open, want 1", len(got))
	}
}
