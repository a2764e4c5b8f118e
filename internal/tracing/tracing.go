// Package tracing holds what idem's packages share to carry a W3C trace
// context (traceparent, tracestate) across the outbox: from the span that
// enqueues a message to its row, from the row to the relay's publish span,
// and from the message's headers to the consumer's span.
//
// Library packages use only the OpenTelemetry API: with no TracerProvider
// configured every span is the API's no-op, and a context without a span
// stores and sends nothing.
package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Header names of the W3C Trace Context recommendation.
const (
	HeaderParent = "traceparent"
	HeaderState  = "tracestate"
)

// Module is the prefix of every tracer name: one tracer per package,
// named by its import path.
const Module = "github.com/idemhq/idem"

var w3c propagation.TraceContext

// Format returns the traceparent and tracestate of ctx's span, or "" and
// "" when ctx holds no valid span context (tracing is off, or the caller
// never started a span).
func Format(ctx context.Context) (parent, state string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	var c pair
	w3c.Inject(ctx, &c)
	return c.parent, BoundState(c.state)
}

// Parse returns ctx with the remote span context that parent and state
// encode, to start a child span of; ctx unchanged when parent is empty or
// not a valid traceparent.
func Parse(ctx context.Context, parent, state string) context.Context {
	if parent == "" {
		return ctx
	}
	return w3c.Extract(ctx, &pair{parent: parent, state: BoundState(state)})
}

// Bounds of a tracestate idem stores and sends, those of the W3C Trace
// Context recommendation: at most MaxStateMembers list members, and
// MaxStateBytes characters in all, the size every vendor must propagate.
const (
	MaxStateMembers = 32
	MaxStateBytes   = 512
	// maxStateMemberBytes: over-long members are dropped first.
	maxStateMemberBytes = 128
)

// BoundState bounds a tracestate before it is stored on an outbox row or
// sent on a message: a client's header of any size would otherwise be
// copied onto every event of its request and every broker message. It
// keeps the first MaxStateMembers members; while the whole is longer
// than MaxStateBytes it drops the members longer than 128 characters,
// then members from the end, as the recommendation says to truncate.
// Empty members (",,") are dropped, the rest kept as written and in
// order; a state within the bounds is returned unchanged.
func BoundState(state string) string {
	if len(state) <= MaxStateBytes && strings.Count(state, ",") < MaxStateMembers {
		return state
	}
	var members []string
	for m := range strings.SplitSeq(state, ",") {
		if m = strings.TrimSpace(m); m != "" && len(members) < MaxStateMembers {
			members = append(members, m)
		}
	}
	size := func() int { return len(strings.Join(members, ",")) }
	if size() > MaxStateBytes {
		kept := members[:0]
		for _, m := range members {
			if len(m) <= maxStateMemberBytes {
				kept = append(kept, m)
			}
		}
		members = kept
	}
	for size() > MaxStateBytes {
		members = members[:len(members)-1]
	}
	return strings.Join(members, ",")
}

// pair is a carrier of the two headers without a map.
type pair struct{ parent, state string }

func (p *pair) Get(key string) string {
	switch key {
	case HeaderParent:
		return p.parent
	case HeaderState:
		return p.state
	}
	return ""
}

func (p *pair) Set(key, value string) {
	switch key {
	case HeaderParent:
		p.parent = value
	case HeaderState:
		p.state = value
	}
}

func (p *pair) Keys() []string { return []string{HeaderParent, HeaderState} }
