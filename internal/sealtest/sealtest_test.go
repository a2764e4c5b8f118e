package sealtest

import (
	"context"
	"errors"
	"testing"

	"github.com/idemhq/idem/seal"
)

func TestSealer(t *testing.T) {
	ctx := context.Background()
	s := New()
	c, err := s.Seal(ctx, "idem_keys", "acme", "op\x00k", []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := s.Open(ctx, "idem_keys", "acme", "op\x00k", c); err != nil || string(p) != "hello" {
		t.Fatalf("open: %q %v", p, err)
	}
	for _, where := range [][3]string{{"idem_outbox", "acme", "op\x00k"}, {"idem_keys", "acme2", "op\x00k"}, {"idem_keys", "acme", "op\x00k2"}} {
		if _, err := s.Open(ctx, where[0], where[1], where[2], c); !errors.Is(err, seal.ErrAuthentication) {
			t.Errorf("opened under %q: %v", where, err)
		}
	}
	if _, err := New().Open(ctx, "idem_keys", "acme", "op\x00k", c); !errors.Is(err, seal.ErrAuthentication) {
		t.Errorf("another key opened it: %v", err)
	}
	s.Forget("acme")
	if _, err := s.Open(ctx, "idem_keys", "acme", "op\x00k", c); !errors.Is(err, seal.ErrForgotten) {
		t.Errorf("forgotten: %v", err)
	}
}

// BenchmarkSealOpen is the CPU cost encryption adds to one stored answer
// of a typical size: sealed once when stored, opened on each replay.
func BenchmarkSealOpen(b *testing.B) {
	ctx := context.Background()
	s := New()
	rec := make([]byte, 120)
	for b.Loop() {
		c, err := s.Seal(ctx, "idem_keys", "acme", "POST /v1/transfers\x00key-0001", rec)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Open(ctx, "idem_keys", "acme", "POST /v1/transfers\x00key-0001", c); err != nil {
			b.Fatal(err)
		}
	}
}
