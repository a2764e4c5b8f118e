package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	loadrun "github.com/idemhq/idem/cmd/idem/internal/load/run"
	"github.com/idemhq/idem/internal/testpatroni"
)

// failoverRun runs idem load --chaos on c: two servers on its multi-host
// URL (never SIGKILLed: the fault is the database's), publishing to a
// NATS server whose stream the verifier checks, the primary's node lost by
// --chaos-failover (scripts/patroni kill-primary) about a second after
// the previous failover is done and its lost node back as the standby; the
// load ends after the third failover (--chaos-failovers 3), or after
// IDEM_TEST_FAILOVERS of them: the longer run (docs/load.md). It returns
// the report, the journal's path and the command's error.
func failoverRun(t *testing.T, c *testpatroni.Cluster, extra ...string) (r loadrun.Report, journal string, err error) {
	t.Helper()
	failovers := testFailovers(t)
	natsURL, _ := startNATS(t)
	// Short deadlines so a request to the lost primary is answered 503
	// within seconds, and a short lease so the relay's shards move on.
	serveCfg := filepath.Join(t.TempDir(), "idem.yaml")
	cfg := "publish: " + natsURL + "\nrelay_lease: 5s\ndb_timeout: 2s\ndb_connect_timeout: 1s\n"
	if err := os.WriteFile(serveCfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	journal = filepath.Join(t.TempDir(), "journal.json")
	args := append([]string{"--chaos", "--db", c.URL, "--serve-bin", binary(t), "--serve-config", serveCfg,
		"--kill-every", "1h", "--chaos-failover", c.KillPrimaryCommand(), "--chaos-failover-every", "1s",
		"--chaos-db-timeout", "3m", "--nats", natsURL, "--journal", journal,
		"--chaos-failovers", strconv.Itoa(failovers), "--duration", (time.Duration(failovers+2) * time.Minute).String(),
		"--operations", "1000000", "--concurrency", "8", "--seed", "17"}, extra...)
	r, err = loadRun(t, args...)
	for _, f := range r.Faults {
		t.Logf("%s at %.1fs: command %.0f ms, first failed request %.0f ms, first success after it %.0f ms (recovered %v), %d requests failed",
			f.Kind, f.AtSeconds, f.CommandMS, f.FirstFailureMS, f.RecoveredMS, f.Recovered, f.FailedRequests)
	}
	t.Logf("%d failovers, %d operations applied, %d acknowledged lost, %d requests, %d retries, %d unresolved, %d events checked in the stream",
		r.Failovers, r.Applied, r.Lost, r.Requests, r.Retries, r.Unresolved, r.EventsChecked)
	if err != nil || r.Violations != 0 {
		t.Logf("cluster logs:\n%s", c.Logs())
	}
	return r, journal, err
}

// testFailovers is the failovers a run makes: 3, or IDEM_TEST_FAILOVERS.
func testFailovers(t *testing.T) int {
	v := os.Getenv("IDEM_TEST_FAILOVERS")
	if v == "" {
		return 3
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		t.Fatalf("IDEM_TEST_FAILOVERS=%q: want 1..1000", v)
	}
	return n
}

// asOfWatch asks, about every second while a run goes on, for the
// balance of an account of its own as of half a second before, through
// a server of its own on the cluster's URL, moving money in between; then
// asks each question again. An answer once given is the answer forever
// (docs/api.md), across failovers too.
type asOfWatch struct {
	url  string
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	seen map[string]string // as_of → the answer's body
}

func watchAsOf(t *testing.T, dbURL string) *asOfWatch {
	t.Helper()
	// No relay: it would publish the run's events to a broker of its own.
	p := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", dbURL, "--db-timeout", "2s", "--db-connect-timeout", "1s", "--relay=false")
	account(t, p.URL, "asof-a", "EUR")
	account(t, p.URL, "asof-b", "EUR")
	w := &asOfWatch{url: p.URL, stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]string{}}
	go func() {
		defer close(w.done)
		cl := &http.Client{Timeout: 10 * time.Second}
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			case <-time.After(time.Second):
			}
			body := fmt.Sprintf(`{"id":"asof-%d","debit_account_id":"asof-a","credit_account_id":"asof-b","amount":1,"currency":"EUR"}`, i)
			req, _ := http.NewRequest("POST", w.url+"/v1/transfers", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", fmt.Sprintf("asof-%d", i))
			if resp, err := cl.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			at := time.Now().Add(-500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
			if status, b := w.balance(cl, at); status == http.StatusOK {
				w.mu.Lock()
				w.seen[at] = b
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *asOfWatch) balance(cl *http.Client, at string) (int, string) {
	resp, err := cl.Get(w.url + "/v1/accounts/asof-b/balance?as_of=" + at)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// check stops the watch and asks every question again: the same answers.
func (w *asOfWatch) check(t *testing.T) {
	t.Helper()
	close(w.stop)
	<-w.done
	if len(w.seen) < 10 {
		t.Fatalf("only %d as-of answers during the run", len(w.seen))
	}
	cl := &http.Client{Timeout: 10 * time.Second}
	for at, was := range w.seen {
		if status, now := w.balance(cl, at); status != http.StatusOK || now != was {
			t.Errorf("balance as of %s: answered %s during the run, now %d %s", at, was, status, now)
		}
	}
}

// verifyLedger runs idem ledger verify on the cluster: the ledger's
// invariants hold on the primary after the failovers.
func verifyLedger(t *testing.T, c *testpatroni.Cluster) {
	t.Helper()
	// A leader that was slow to renew its lock on a loaded machine steps
	// down for a moment: wait for one.
	c.Wait(t)
	if out, stderr, code := runIdem(t, nil, "ledger", "verify", "--db", c.URL); code != 0 || !strings.Contains(out, "ledger OK") {
		t.Fatalf("ledger verify (%d): %s%s", code, out, stderr)
	}
}

// Patroni with synchronous_mode, its primary's node lost three times
// under idem load: every acknowledged operation exactly once, nothing
// acknowledged lost, every event published once to the stream (the
// relays followed each new primary), the ledger sound, and as-of answers
// the same after the failovers as during them.
func TestPatroniSyncFailover(t *testing.T) {
	t.Parallel()
	c := testpatroni.Start(t, testpatroni.Config{Sync: true})
	w := watchAsOf(t, c.URL)
	r, _, err := failoverRun(t, c)
	if err != nil || r.Violations != 0 {
		t.Fatalf("load: %v; %d violations: %v", err, r.Violations, r.Details)
	}
	if r.Failovers < testFailovers(t) || r.Lost != 0 || r.Applied == 0 || r.EventsChecked == 0 || r.Unresolved != 0 {
		t.Fatalf("report: %+v", r)
	}
	w.check(t)
	verifyLedger(t, c)
}

// Patroni with asynchronous replication, the same run with --expect-loss:
// an acknowledged operation the promoted standby never received is a
// figure (logged), not a failure; everything else holds. A lost key sent
// again with its key does the work again, once: a replay after that.
func TestPatroniAsyncFailover(t *testing.T) {
	t.Parallel()
	c := testpatroni.Start(t, testpatroni.Config{})
	r, journal, err := failoverRun(t, c, "--expect-loss")
	if err != nil || r.Violations != 0 {
		t.Fatalf("load: %v; %d violations: %v", err, r.Violations, r.Details)
	}
	if r.Failovers < testFailovers(t) || r.Applied == 0 || r.EventsChecked == 0 || r.Unresolved != 0 {
		t.Fatalf("report: %+v", r)
	}
	t.Logf("asynchronous replication: %d of %d acknowledged operations lost in %d failovers", r.Lost, r.Acknowledged, r.Failovers)
	j, err := loadrun.ReadJournal(journal)
	if err != nil {
		t.Fatal(err)
	}
	lost := map[string]bool{}
	for _, k := range r.LostKeys {
		lost[k] = true
	}
	p := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", c.URL, "--relay=false")
	for _, o := range j.Ops {
		if !lost[o.Key] {
			continue
		}
		var answers []response
		for range 2 {
			answers = append(answers, call(t, "POST", p.URL+o.Path, o.Key, o.Body))
		}
		// The first retry may be a replay: a later copy of the run's may
		// have done the work again already.
		if answers[0].Status != o.Status || answers[1].Header.Get("Idempotent-Replayed") != "true" ||
			string(answers[1].Body) != string(answers[0].Body) {
			t.Fatalf("lost %s sent again: %d %s, then %d %v %s", o.Key, answers[0].Status, answers[0].Body,
				answers[1].Status, answers[1].Header, answers[1].Body)
		}
		var got map[string]any
		_ = json.Unmarshal(answers[1].Body, &got)
		if got["id"] != o.ID {
			t.Fatalf("lost %s sent again answers %s", o.Key, answers[1].Body)
		}
	}
	verifyLedger(t, c)
}
