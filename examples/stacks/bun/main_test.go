package main

import (
	"os"
	"testing"

	"github.com/idemhq/idem/examples/stacks/shop"
	"github.com/idemhq/idem/idemtest"
)

func TestMain(m *testing.M) {
	shop.RelayMain(stack) // the crash test re-runs this binary as a relay
	os.Exit(idemtest.Main(m))
}

// idemtest's two tests and the rollback test, on bun.
func TestBun(t *testing.T) { shop.Check(t, stack) }
