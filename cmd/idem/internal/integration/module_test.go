// Package integration_test holds the tests that need what the library's
// module must not require. Its subdirectories test library packages with a
// real broker (an embedded nats-server, kfake) or a provider's own client
// (stripe-go); this file checks that the library's module stays without
// them.
package integration_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// heavy are the modules the idem binary and its tests need and a user of
// the library must not get: NATS's server, the browser driver of the
// console's tests, Stripe's SDK and Kafka's fake cluster; and the RPC
// frameworks, which only the modules idemgrpc and idemconnect require.
var heavy = []string{
	"github.com/nats-io/nats-server/",
	"github.com/chromedp/",
	"github.com/stripe/stripe-go/",
	"github.com/twmb/franz-go/pkg/kfake",
	"google.golang.org/grpc",
	"connectrpc.com/connect",
}

func isHeavy(module string) bool {
	return slices.ContainsFunc(heavy, func(h string) bool { return strings.HasPrefix(module, h) })
}

// The library's go.mod requires none of the heavy modules, and a program
// that imports idem and idemhttp, in a module of its own, has none of them
// in its module graph.
func TestLibraryModuleIsLean(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", "..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	edit := exec.Command("go", "mod", "edit", "-json")
	edit.Dir = root
	out, err := edit.Output()
	if err != nil {
		t.Fatalf("go mod edit -json in %s: %v", root, err)
	}
	var mod struct {
		Module  struct{ Path string }
		Require []struct{ Path string }
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	if mod.Module.Path != "github.com/idemhq/idem" {
		t.Fatalf("%s/go.mod is module %q, not the library", root, mod.Module.Path)
	}
	for _, r := range mod.Require {
		if isHeavy(r.Path) {
			t.Errorf("the library's go.mod requires %s", r.Path)
		}
	}

	user := t.TempDir()
	writeFile(t, filepath.Join(user, "go.mod"), "module example.com/libuser\n\ngo 1.26.0\n\n"+
		"require github.com/idemhq/idem v0.0.0\n\nreplace github.com/idemhq/idem => "+root+"\n")
	writeFile(t, filepath.Join(user, "main.go"), `package main

import (
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
)

func main() { fmt.Println(idem.ErrInFlight, idemhttp.HeaderKey) }
`)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = user
		cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
			return strings.HasPrefix(kv, "GOFLAGS=") || strings.HasPrefix(kv, "GOWORK=")
		}), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s in a module that imports idem and idemhttp: %v\n%s%s", strings.Join(args, " "), err, out, stderrOf(err))
		}
		return string(out)
	}
	run("build", "-o", filepath.Join(user, "libuser"), ".")
	graph := strings.Split(strings.TrimSpace(run("mod", "graph")), "\n")
	t.Logf("go mod graph of a program importing idem and idemhttp: %d lines", len(graph))
	for _, edge := range graph {
		for _, m := range strings.Fields(edge) {
			if isHeavy(m) {
				t.Errorf("the module graph of a program importing idem and idemhttp has %s (%s)", m, edge)
			}
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
