package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/sqlite"
)

// docPage is the page that shows this program whole.
const docPage = "../../docs/idemhttp.md"

// docs/idemhttp.md's quickstart is this file, character for character,
// so that the program a reader copies from the page compiles and is the
// one TestQuickstart runs.
func TestDocIsThisProgram(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(docPage)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	const open, end = "<!-- quickstart: examples/quickstart/main.go -->\n```go\n", "```\n"
	_, block, ok := strings.Cut(string(page), open)
	if ok {
		block, _, ok = strings.Cut(block, end)
	}
	if !ok {
		t.Fatalf("%s has no block opened by %q", docPage, open)
	}
	if block != string(src) {
		t.Errorf("%s's quickstart differs from examples/quickstart/main.go: copy the file into the page", docPage)
	}
}

// The quickstart serves, on a SQLite file it creates: a request is done
// once and its retry replayed (one row), a malformed one leaves the key
// free for the corrected request, and it stops (janitor included) when
// its context ends.
func TestQuickstart(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "data", "app.db")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, ln, dbPath) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	url := "http://" + ln.Addr().String() + "/v1/greetings"
	post := func(key, body string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b)
	}
	for i, want := range []struct {
		key, body, replayed string
		status              int
	}{
		{"k1", `{"name":"ada"}`, "", 201},
		{"k1", `{"name":"ada"}`, "true", 201},
		{"k2", `{"name":""}`, "", 400},
		{"k2", `{"name":"grace"}`, "", 201},
	} {
		status, replayed, body := post(want.key, want.body)
		if status != want.status || replayed != want.replayed {
			t.Fatalf("request %d (%s %s): %d replayed=%q %s, want %d replayed=%q", i, want.key, want.body, status, replayed, body, want.status, want.replayed)
		}
	}
	d, err := sqlite.Open(context.Background(), sqlite.Config{Path: dbPath, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var names []string
	tx, err := d.Begin(context.Background(), driver.BeginOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	rows, err := tx.Query(context.Background(), `SELECT name FROM greetings ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	if strings.Join(names, ",") != "ada,grace" {
		t.Errorf("greetings %q, want one row per key: ada,grace", names)
	}
}
