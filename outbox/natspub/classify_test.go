package natspub

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/outbox"
)

// A cluster that lost quorum, a stream that is offline, a server gone or
// a republish that meets its first publish still in process are the
// broker's faults (the relay backs off and counts no attempt); a message
// JetStream refuses for itself is not.
func TestClassify(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err         error
		unavailable bool
	}{
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{&jetstream.APIError{Code: 500, ErrorCode: 10118, Description: "stream is offline"}, true},
		{&jetstream.APIError{Code: 409, ErrorCode: 10158, Description: "duplicate message id is in process"}, true},
		{fmt.Errorf("ack: %w", &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "no quorum"}), true},
		{jetstream.ErrNoStreamResponse, true},
		{jetstream.ErrAsyncPublishTimeout, true},
		{nats.ErrNoResponders, true},
		{nats.ErrTimeout, true},
		{nats.ErrDisconnected, true},
		// A node going down mid-batch: the client's inline flush of a
		// full buffer returns the socket's error as it is.
		{&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{jetstream.ErrStreamMessageExceedsMaximum, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10071, Description: "wrong last sequence"}, false},
		{errors.New("refused"), false},
	} {
		if got := errors.Is(classify(c.err), outbox.ErrBrokerUnavailable); got != c.unavailable {
			t.Errorf("%v: unavailable %v, want %v", c.err, got, c.unavailable)
		}
	}
}

// Replicas is bounded by JetStream's 1..5 (0: the default).
func TestConfigReplicas(t *testing.T) {
	t.Parallel()
	if c := (Config{}).withDefaults(); c.validate() != nil {
		t.Fatalf("default: %+v %v", c, c.validate())
	}
	for _, r := range []int{-1, 6} {
		if err := (Config{Replicas: r}).withDefaults().validate(); err == nil {
			t.Errorf("replicas %d accepted", r)
		}
	}
}
