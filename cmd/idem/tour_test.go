package main

import (
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The README's five-minute tour, as a test: two accounts, a transfer, its
// retry, a reversal, and the balance as believed before the reversal.
func TestTour(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		p, db := serveDB(t, dialect, nil)
		u := p.URL
		mustStatus(t, call(t, "POST", u+"/v1/accounts", "create-alice", `{"id":"alice","currency":"EUR"}`), 201)
		mustStatus(t, call(t, "POST", u+"/v1/accounts", "create-bob", `{"id":"bob","currency":"EUR"}`), 201)

		body := `{"debit_account_id":"alice","credit_account_id":"bob","amount":1250,"currency":"EUR"}`
		first := call(t, "POST", u+"/v1/transfers", "order-1042", body)
		mustStatus(t, first, 201)
		retry := call(t, "POST", u+"/v1/transfers", "order-1042", body)
		if retry.Header.Get("Idempotent-Replayed") != "true" || string(retry.Body) != string(first.Body) {
			t.Fatalf("retry: %v %s", retry.Header, retry.Body)
		}
		id := first.json(t)["id"].(string)

		time.Sleep(5 * time.Millisecond)
		beforeReversal := time.Now().UTC()
		time.Sleep(5 * time.Millisecond)
		rev := call(t, "POST", u+"/v1/transfers/"+id+"/reversals", "refund-1042", `{"amount":250,"reason":"one item returned"}`)
		mustStatus(t, rev, 201)
		if r := rev.json(t); r["reverses_id"] != id || r["reason"] != "one item returned" || r["debit_account_id"] != "bob" {
			t.Fatalf("reversal: %s", rev.Body)
		}

		now := call(t, "GET", u+"/v1/accounts/bob/balance", "", nil).json(t)
		then := call(t, "GET", u+"/v1/accounts/bob/balance?as_of="+beforeReversal.Format(time.RFC3339Nano), "", nil).json(t)
		if now["balance"] != float64(1000) || then["balance"] != float64(1250) {
			t.Fatalf("bob now %v, before the reversal %v; want 1000 and 1250", now["balance"], then["balance"])
		}
		tr := call(t, "GET", u+"/v1/transfers/"+id, "", nil)
		mustStatus(t, tr, http.StatusOK)
		if revs, _ := tr.json(t)["reversals"].([]any); len(revs) != 1 || tr.json(t)["amount"] != float64(1250) {
			t.Fatalf("transfer with reversals: %s", tr.Body)
		}

		// The hold: reserved, listed, captured in part; a void after it refused.
		mustStatus(t, call(t, "POST", u+"/v1/transfers", "auth-77",
			`{"id":"auth-77","debit_account_id":"bob","credit_account_id":"alice","amount":800,"currency":"EUR","pending":true,"timeout_seconds":3600}`), 201)
		if b := call(t, "GET", u+"/v1/accounts/bob", "", nil).json(t); b["balance"] != float64(1000) || b["available"] != float64(200) {
			t.Fatalf("bob with the hold: %v", b)
		}
		if open, _ := call(t, "GET", u+"/v1/transfers?status=pending", "", nil).json(t)["data"].([]any); len(open) != 1 {
			t.Fatalf("open holds: %v", open)
		}
		mustStatus(t, call(t, "POST", u+"/v1/transfers/auth-77/post", "capture-77", `{"amount":650}`), 201)
		if r := call(t, "POST", u+"/v1/transfers/auth-77/void", "void-77", `{}`); r.Status != 422 || r.code(t) != "pending_transfer_already_posted" {
			t.Fatalf("void after the capture: %d %s", r.Status, r.Body)
		}
		if b := call(t, "GET", u+"/v1/accounts/bob", "", nil).json(t); b["balance"] != float64(350) || b["debits_pending"] != float64(0) {
			t.Fatalf("bob after the capture: %v", b)
		}
		// The operators' commands the README names after the tour, on the
		// tour's database.
		fill := strings.NewReplacer("KEY", "order-1042", "ACCOUNT", "bob", "TIME", beforeReversal.Format(time.RFC3339Nano))
		for _, c := range readmeOperatorCommands(t) {
			args := append(strings.Fields(fill.Replace(c)), "--db", db)
			out, errOut, code := runIdem(t, nil, args...)
			if code != 0 {
				t.Errorf("README's `idem %s`: exit %d\n%s%s", c, code, out, errOut)
			}
			if strings.HasPrefix(c, "ledger balance") && !strings.Contains(out, "1250") {
				t.Errorf("README's `idem %s` as of before the reversal: %s, want bob's 1250", c, out)
			}
		}
	})
}

// readmeOperatorCommands is the `idem …` commands of the README's
// "Operators:" paragraph, without "idem ". The paragraph must say where
// the binary comes from: nothing in the tour installs it.
func readmeOperatorCommands(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, para, ok := strings.Cut(string(readme), "\nOperators: ")
	para, _, _ = strings.Cut(para, "\n\n")
	if !ok {
		t.Fatal(`README.md has no "Operators: " paragraph`)
	}
	for _, want := range []string{"`go install ./cmd/idem`", "`$(go env GOPATH)/bin`", "`go run ./cmd/idem "} {
		if !strings.Contains(para, want) {
			t.Errorf("README's Operators paragraph does not say %s: a reader after the tour has no idem binary", want)
		}
	}
	var cmds []string
	for _, m := range regexp.MustCompile("`idem ([^`]+)`").FindAllStringSubmatch(strings.ReplaceAll(para, "\n", " "), -1) {
		cmds = append(cmds, m[1])
	}
	if len(cmds) < 4 {
		t.Fatalf("README's Operators paragraph names %d idem commands, want the 4 it shows: %q", len(cmds), para)
	}
	return cmds
}

// The README keeps two set-up commands, one that runs idem and one that
// runs every test, and says beside the first how long its first compile
// takes: minutes on a small machine, which would otherwise look hung.
func TestReadmeSetUpCommands(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		if strings.Contains(block[1], "curl ") { // the tour
			continue
		}
		for line := range strings.Lines(block[1]) {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				cmds = append(cmds, l)
			}
		}
	}
	if len(cmds) != 2 || !strings.HasPrefix(cmds[0], "go run ./cmd/idem serve") || cmds[1] != "make test" {
		t.Fatalf("README's set-up commands are %q, want go run ./cmd/idem serve and make test", cmds)
	}
	if !strings.Contains(cmds[0], "# the first run compiles idem: about 4 minutes") {
		t.Errorf("README's %q does not say beside it how long the first compile takes", cmds[0])
	}
}
