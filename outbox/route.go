package outbox

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnroutable is wrapped by the error of a message whose type Routes
// maps to no destination. It is ErrUndeliverable too: the relay makes the
// message a dead letter at once, naming its type.
var ErrUnroutable = errors.New("outbox: no route for the event type")

// Limits on Routes.
const (
	MaxRoutes         = 1000
	MaxDestinationLen = 255
)

// Routes maps an event's type to a publisher's destination: a Kafka topic,
// the subject under a NATS stream's prefix, a RabbitMQ routing key. The
// zero value sends every event to the publisher's default destination.
type Routes struct {
	// Table maps a type to its destination, looked up first. At most
	// MaxRoutes entries.
	Table map[string]string
	// Template is the destination of a type the table lacks, with
	// "{type}" and "{tenant}" replaced by the message's. Empty: the
	// publisher's default when Table is empty too, else the type is
	// unroutable (a dead letter with ErrUnroutable).
	Template string
}

// Validate checks the table's size and its destinations' lengths.
func (r Routes) Validate() error {
	if len(r.Table) > MaxRoutes {
		return fmt.Errorf("outbox: %d routes, more than %d", len(r.Table), MaxRoutes)
	}
	for t, dest := range r.Table {
		if t == "" || dest == "" || len(dest) > MaxDestinationLen {
			return fmt.Errorf("outbox: route %q -> %q: want a type and a destination of 1..%d bytes", t, dest, MaxDestinationLen)
		}
	}
	if len(r.Template) > MaxDestinationLen {
		return fmt.Errorf("outbox: route template longer than %d bytes", MaxDestinationLen)
	}
	return nil
}

// Destination is m's destination: its type's entry in Table, else
// Template filled in, else def when Table is empty. A type with none is
// an error wrapping ErrUnroutable and ErrUndeliverable.
func (r Routes) Destination(m Message, def string) (string, error) {
	if dest, ok := r.Table[m.Type]; ok {
		return dest, nil
	}
	switch {
	case r.Template != "":
		return strings.NewReplacer("{type}", m.Type, "{tenant}", m.Tenant).Replace(r.Template), nil
	case len(r.Table) == 0:
		return def, nil
	}
	return "", Undeliverable(fmt.Errorf("%w %q (tenant %q)", ErrUnroutable, m.Type, m.Tenant))
}
