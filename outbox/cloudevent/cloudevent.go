// Package cloudevent maps an outbox message to a CloudEvents 1.0 event,
// for the publishers that send one (natspub, kafka, webhookpub, amqppub):
// the context attributes of binary content mode, each publisher putting
// them in its protocol's headers under its binding's prefix, and the JSON
// of structured content mode.
//
// The event's id is the outbox row's id, so a consumer that deduplicates by
// id (with source, as CloudEvents defines an event's identity) drops the
// relay's republishes as the broker would. Its type is the message's type,
// subject the message's ordering key (the aggregate's id), time the
// message's CreatedAt, and the W3C trace context of the relay's publish
// span travels as the distributed-tracing extension (traceparent,
// tracestate), beside the protocol's own trace headers.
package cloudevent

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/idemhq/idem/outbox"
)

// Format is what a publisher puts on the wire.
type Format string

const (
	// Idem is idem's own headers (idem-type, idem-tenant, …) and body: the
	// default, the wire format of releases before CloudEvents, so existing
	// consumers read what they always read.
	Idem Format = "idem"
	// Binary is CloudEvents binary content mode: the attributes as headers
	// (ce-id, ce_type, cloudEvents:source, per binding), the payload as the
	// body.
	Binary Format = "cloudevents"
	// Structured is CloudEvents structured content mode: the body is the
	// event as JSON (application/cloudevents+json), data inside it.
	Structured Format = "cloudevents-structured"
	// Both is idem's headers and CloudEvents binary mode's together, for a
	// migration of consumers from one to the other.
	Both Format = "both"
)

// Formats lists the values ParseFormat accepts.
var Formats = []Format{Idem, Binary, Structured, Both}

// ParseFormat reads a format's name; "" is Idem.
func ParseFormat(s string) (Format, error) {
	if s == "" {
		return Idem, nil
	}
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("cloudevent: format %q: want idem, cloudevents, cloudevents-structured or both", s)
}

// IdemHeaders says the format carries idem's own headers.
func (f Format) IdemHeaders() bool { return f == "" || f == Idem || f == Both }

// BinaryMode says the format carries the CloudEvents attributes as headers.
func (f Format) BinaryMode() bool { return f == Binary || f == Both }

// StructuredMode says the body is the event as JSON.
func (f Format) StructuredMode() bool { return f == Structured }

// Content types of the two modes' bodies.
const (
	ContentTypeData       = "application/json"
	ContentTypeStructured = "application/cloudevents+json"
)

// SpecVersion is the CloudEvents version idem sends.
const SpecVersion = "1.0"

// DefaultSource is the source template when a publisher names none.
const DefaultSource = "/idem/{tenant}"

// MaxSourceLen bounds a source.
const MaxSourceLen = 255

// Source fills template's "{tenant}" with tenant; "" is DefaultSource's.
func Source(template, tenant string) string {
	if template == "" {
		template = DefaultSource
	}
	return strings.ReplaceAll(template, "{tenant}", tenant)
}

// Attr is one context attribute by its CloudEvents name.
type Attr struct{ Name, Value string }

// Attributes are m's context attributes in binary mode, without the
// binding's prefix and without datacontenttype (each binding carries it in
// its protocol's content-type): specversion, id, source, type, time,
// subject when m has a key, traceparent and tracestate when m's headers
// have them.
func Attributes(m outbox.Message, source string) []Attr {
	a := make([]Attr, 0, 8)
	a = append(a,
		Attr{"specversion", SpecVersion},
		Attr{"id", m.ID},
		Attr{"source", source},
		Attr{"type", m.Type},
		Attr{"time", m.CreatedAt.UTC().Format(time.RFC3339Nano)},
	)
	if m.Key != "" {
		a = append(a, Attr{"subject", m.Key})
	}
	for _, h := range [...]string{outbox.HeaderTraceParent, outbox.HeaderTraceState} {
		if v := m.Headers[h]; v != "" {
			a = append(a, Attr{h, v})
		}
	}
	return a
}

// event is structured mode's JSON.
type event struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Time            string          `json:"time"`
	Subject         string          `json:"subject,omitempty"`
	DataContentType string          `json:"datacontenttype"`
	TraceParent     string          `json:"traceparent,omitempty"`
	TraceState      string          `json:"tracestate,omitempty"`
	Data            json.RawMessage `json:"data"`
}

// JSON is m as a structured-mode event: the body of a message whose
// content type is ContentTypeStructured.
func JSON(m outbox.Message, source string) ([]byte, error) {
	return json.Marshal(event{
		SpecVersion: SpecVersion, ID: m.ID, Source: source, Type: m.Type,
		Time: m.CreatedAt.UTC().Format(time.RFC3339Nano), Subject: m.Key,
		DataContentType: ContentTypeData,
		TraceParent:     m.Headers[outbox.HeaderTraceParent], TraceState: m.Headers[outbox.HeaderTraceState],
		Data: m.Payload,
	})
}

// Config is a publisher's CloudEvents setting.
type Config struct {
	// Format is what goes on the wire. Default Idem.
	Format Format
	// Source is the events' source (a URI-reference), "{tenant}" replaced
	// by the message's tenant. Default DefaultSource; at most
	// MaxSourceLen bytes.
	Source string
}

// WithDefaults fills the defaults.
func (c Config) WithDefaults() Config {
	if c.Format == "" {
		c.Format = Idem
	}
	if c.Source == "" {
		c.Source = DefaultSource
	}
	return c
}

// Validate checks c (after WithDefaults).
func (c Config) Validate() error {
	if _, err := ParseFormat(string(c.Format)); err != nil {
		return err
	}
	if len(c.Source) > MaxSourceLen {
		return fmt.Errorf("cloudevent: source longer than %d bytes", MaxSourceLen)
	}
	return nil
}
