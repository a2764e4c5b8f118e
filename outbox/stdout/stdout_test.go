package stdout_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"sync"
	"testing"

	"github.com/idemhq/idem/outbox/outboxtest"
	"github.com/idemhq/idem/outbox/stdout"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestConformance(t *testing.T) {
	outboxtest.Run(t, func(t *testing.T) outboxtest.Harness {
		buf := &syncBuffer{}
		pub, err := stdout.New(stdout.Config{Writer: buf})
		if err != nil {
			t.Fatal(err)
		}
		return outboxtest.Harness{Publisher: pub, Received: func(t *testing.T) []outboxtest.Received {
			var out []outboxtest.Received
			sc := bufio.NewScanner(bytes.NewBufferString(buf.String()))
			for sc.Scan() {
				var l stdout.Line
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					t.Fatalf("line %q: %v", sc.Text(), err)
				}
				out = append(out, outboxtest.Received{ID: l.ID, Type: l.Type, Key: l.Key, Payload: l.Payload})
			}
			return out
		}}
	})
}
