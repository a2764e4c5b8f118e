package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// stored is the least program answering a cold replay (httpbench stored):
// what any HTTP service must do to answer a retried request from its
// database when the answer is in no cache. A request's Idempotency-Key is
// required and its body read; the key's stored answer is read by its
// primary key, one statement on a pool of conns connections, and its
// status, headers and body written back with Idempotent-Replayed: true.
// It reads the answers idem stored, under scope and operation. Of idem's
// work it leaves out the body's fingerprint, one hash of a few hundred
// bytes, which it could not compare with idem's anyway.
func stored(addr, dsn, scope, operation string, conns int) error {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	return serveCeiling(addr, storedHandler(pool, scope, operation))
}

func storedHandler(pool *pgxpool.Pool, scope, operation string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			http.Error(w, "bad request: no Idempotency-Key", http.StatusBadRequest)
			return
		}
		if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20)); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var status int
		var header, body []byte
		err := pool.QueryRow(r.Context(), `SELECT status, header, body FROM idem_keys
			WHERE scope = $1 AND operation = $2 AND key = $3`, scope, operation, key).Scan(&status, &header, &body)
		if errors.Is(err, pgx.ErrNoRows) {
			http.Error(w, "no answer stored for "+key, http.StatusNotFound)
			return
		}
		var h http.Header
		if err == nil {
			err = json.Unmarshal(header, &h)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		maps.Copy(w.Header(), h)
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}
}
