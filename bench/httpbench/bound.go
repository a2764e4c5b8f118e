package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/strictjson"
)

// bound serves the one-statement ceiling over HTTP: the least any HTTP
// service must do for a first arrival, to set idem's figure beside. Each
// POST /v1/transfers runs the pgbench script's one statement (everything a
// transfer writes) for the body's two accounts and a key of its own, and
// answers 201 with a fixed body once its transaction commits; POST
// /v1/accounts answers 201 and does nothing (bench/pgbench/setup.sql made
// acc-1…acc-1000).
//
// One writer takes the waiting requests, up to batchMax, and sends BEGIN,
// their statements and COMMIT in one round trip: one commit a batch, as
// idem's group commit, and nothing else of idem's (no key read or claim
// before the work, no lookups or refusals, no stored answer built, no
// relay). A single writer because each statement locks its two accounts as
// it runs: two writers' transactions take them in no common order and
// deadlock.
//
// With idemWork it is the least program doing what idem does for a first
// arrival, to set idem's unmet ratios beside: a request's Idempotency-Key
// is required and its body checked as strict JSON and decoded whole, and
// a batch's transaction takes idem's three round trips: BEGIN and the
// keys' claims (one statement), the transfers, then the stored answers
// (one statement) and COMMIT. trips is then 3.
func bound(addr, dsn, script string, batchMax, bodyBytes, trips int, idemWork bool) error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	body := bytes.Repeat([]byte("x"), bodyBytes)
	commit, err := boundCommit(ctx, conn, script, body, trips, idemWork)
	if err != nil {
		return err
	}
	return serveCeiling(addr, batchHandler(batchMax, body, idemWork, commit))
}

// boundCommit prepares script's statement on conn and returns what writes
// a batch of transfers: with idemWork in idem's three round trips, else in
// trips.
func boundCommit(ctx context.Context, conn *pgx.Conn, script string, body []byte, trips int, idemWork bool) (func([]transfer) error, error) {
	src, err := os.ReadFile(script)
	if err != nil {
		return nil, err
	}
	sql, err := pgbenchStatement(string(src))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", script, err)
	}
	if _, err := conn.Prepare(ctx, "transfer", sql); err != nil {
		return nil, fmt.Errorf("%s: %w", script, err)
	}
	if idemWork {
		if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS bound_keys (key text PRIMARY KEY, answer bytea)"); err != nil {
			return nil, err
		}
		return func(taken []transfer) error {
			keys := make([]string, len(taken))
			for i, t := range taken {
				keys[i] = t.key
			}
			// trip sends batch, the transaction rolled back if it fails.
			trip := func(batch *pgx.Batch) error {
				err := conn.SendBatch(ctx, batch).Close()
				if err != nil {
					_, _ = conn.Exec(ctx, "ROLLBACK")
				}
				return err
			}
			claims, transfers, answers := &pgx.Batch{}, &pgx.Batch{}, &pgx.Batch{}
			claims.Queue("BEGIN")
			claims.Queue("INSERT INTO bound_keys (key) SELECT unnest($1::text[])", keys)
			for _, t := range taken {
				transfers.Queue("transfer", t.k, t.a, t.b)
			}
			answers.Queue("UPDATE bound_keys SET answer = $2 WHERE key = ANY($1::text[])", keys, body)
			answers.Queue("COMMIT")
			for _, b := range []*pgx.Batch{claims, transfers, answers} {
				if err := trip(b); err != nil {
					return err
				}
			}
			return nil
		}, nil
	}
	return func(taken []transfer) error {
		var batch pgx.Batch
		batch.Queue("BEGIN")
		for _, t := range taken {
			batch.Queue("transfer", t.k, t.a, t.b)
		}
		for range trips - 1 {
			if err := conn.SendBatch(ctx, &batch).Close(); err != nil {
				return err
			}
			batch = pgx.Batch{}
			batch.Queue("SELECT 1")
		}
		batch.Queue("COMMIT")
		return conn.SendBatch(ctx, &batch).Close()
	}, nil
}

// A transfer a bound server writes: key number k (and with idem's work
// its Idempotency-Key), from acc-a to acc-b.
type transfer struct {
	k, a, b int64
	key     string
	done    chan error
}

// serveBatches serves batchHandler on addr.
func serveBatches(addr string, batchMax int, body []byte, idemWork bool, commit func([]transfer) error) error {
	return serveCeiling(addr, batchHandler(batchMax, body, idemWork, commit))
}

// batchHandler answers POST /v1/transfers once commit has written its
// transfer, and POST /v1/accounts at once (the accounts exist). One
// goroutine, started here, takes the waiting transfers, up to batchMax,
// and commits them together: while one batch commits, the next fills.
// With idemWork a request needs an Idempotency-Key, and its body is
// checked as strict JSON and decoded whole, as idem's are.
func batchHandler(batchMax int, body []byte, idemWork bool, commit func([]transfer) error) http.HandlerFunc {
	queue := make(chan transfer, 4096)
	go func() {
		var taken []transfer
		for t := range queue {
			taken = append(taken[:0], t)
		fill:
			for len(taken) < batchMax {
				select {
				case t := <-queue:
					taken = append(taken, t)
				default:
					break fill
				}
			}
			err := commit(taken)
			for _, t := range taken {
				t.done <- err
			}
		}
	}()

	// Keys 9e15 and up, apart from pgbench's random(1, 9e15) and from an
	// earlier run's.
	var next atomic.Int64
	next.Store(9_000_000_000_000_000 + time.Now().UnixMicro()%100_000_000_000*1000)
	return func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			ID       string `json:"id"` // an account's
			Debit    string `json:"debit_account_id"`
			Credit   string `json:"credit_account_id"`
			Amount   int64  `json:"amount"`
			Currency string `json:"currency"`
		}
		key := r.Header.Get("Idempotency-Key")
		if err := decode(r, &in, idemWork); err != nil || idemWork && key == "" {
			http.Error(w, fmt.Sprint("bad request: ", err), http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/v1/accounts": // they exist
		case "/v1/transfers":
			a, errA := strconv.ParseInt(strings.TrimPrefix(in.Debit, "acc-"), 10, 64)
			b, errB := strconv.ParseInt(strings.TrimPrefix(in.Credit, "acc-"), 10, 64)
			if err := errors.Join(errA, errB); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			t := transfer{k: next.Add(1), a: a, b: b, key: key, done: make(chan error, 1)}
			queue <- t
			if err := <-t.done; err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		default:
			http.NotFound(w, r)
			return
		}
		created(w, body)
	}
}

// decode reads r's JSON body into v; strict (idem's work), the body is
// read whole, bounded, checked by idem's strict JSON check (duplicate
// names, depth) and decoded refusing unknown fields.
func decode(r *http.Request, v any, strict bool) error {
	if !strict {
		return json.NewDecoder(r.Body).Decode(v)
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return err
	}
	if err := strictjson.Check(data, 32); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// pgbenchVar is a use of pgbench's variable k, a or b (not a cast's "::b…").
var pgbenchVar = regexp.MustCompile(`(^|[^:]):([kab])\b`)

// pgbenchStatement turns a pgbench script of \set lines and one statement
// into that statement with its variables as parameters: :k the key's
// number ($1), :a and :b the debit and credit accounts' ($2, $3).
func pgbenchStatement(script string) (string, error) {
	var lines []string
	for line := range strings.Lines(script) {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, `\`) || strings.HasPrefix(t, "--") {
			continue
		}
		lines = append(lines, line)
	}
	sql := strings.TrimSuffix(strings.TrimSpace(strings.Join(lines, "")), ";")
	if strings.Contains(sql, ";") {
		return "", errors.New("more than one statement")
	}
	params := map[string]string{"k": "$1::bigint", "a": "$2::bigint", "b": "$3::bigint"}
	return pgbenchVar.ReplaceAllStringFunc(sql, func(m string) string {
		i := strings.IndexByte(m, ':')
		return m[:i] + params[m[i+1:]]
	}), nil
}
