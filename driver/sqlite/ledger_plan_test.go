package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// Verify reads every transfer with its entries. As a join, on SQLite (nested
// loops only) that searched ledger_entries once per transfer, by the primary
// key on the tenant alone, so every transfer read all of its tenant's
// entries: a ledger of 60,000 entries took minutes to verify. The scan must
// read each table once and merge them.
func TestLedgerScanReadsEachTableOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "idem.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := d.read.QueryContext(ctx, `EXPLAIN QUERY PLAN `+sqlLedgerScanTransfers)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "MERGE (UNION ALL)") || strings.Count(text, "SCAN ledger_transfers") != 1 ||
		strings.Count(text, "SCAN ledger_entries") != 1 || strings.Contains(text, "SEARCH") {
		t.Errorf("the scan does not read each table once:\n%s", text)
	}
}

// The batch statements read their rows from a JSON list or from VALUES
// rows. Each key must be one search of the primary key: a plan that
// scanned a table would read every account, transfer or key for each
// batch.
func TestLedgerBatchPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "idem.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for name, query := range map[string]string{
		"accounts by keys": sqlLedgerAccountsByKeys,
		"transfers find":   sqlLedgerTransfersFind,
		"accounts move":    sqlLedgerAccountsMove[0],
		"accounts move 8":  sqlLedgerAccountsMove[3],
		"key record":       sqlKeyRecordRows[0],
		"key record 8":     sqlKeyRecordRows[3],
	} {
		args := make([]any, strings.Count(query, "?")) // NULLs, but for the JSON list
		args[0] = `[]`
		rows, err := d.read.QueryContext(ctx, `EXPLAIN QUERY PLAN `+query, args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		text := strings.Join(plan, "\n")
		if strings.Contains(text, "SCAN ledger_") || strings.Contains(text, "SCAN idem_") ||
			!strings.Contains(text, "USING PRIMARY KEY (") {
			t.Errorf("%s does not search the primary key per key:\n%s", name, text)
		}
	}
}
