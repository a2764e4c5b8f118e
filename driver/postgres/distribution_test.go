package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// These tests keep the precondition of docs/architecture.md, "Past one
// primary", true of today's schema: with the tenant as a distributed
// PostgreSQL's distribution column, every row a request touches lives on
// the tenant's shard. That needs every primary key and unique constraint
// of a tenant's table to lead with the tenant (Citus requires a distributed
// table's unique constraints to include the distribution column), and every
// hot-path statement to find its rows through an index that leads with it.

// tenantColumns are the columns that hold the tenant: idem_keys calls it
// scope.
var tenantColumns = []string{"tenant", "scope"}

// notByTenant are the tables whose keys do not lead with the tenant, each
// with why and what it becomes past one primary. A table missing here whose
// key does not lead with the tenant fails the test.
var notByTenant = map[string]string{
	"idem_outbox": "primary key (id): the relay marks and reads rows by id across tenants; " +
		"distributed by tenant it needs the key (tenant, id) and the relay's statements the tenant",
	"idem_outbox_shards": "the relay's 64 shard leases, shared by every tenant: a reference table",
	"idem_outbox_relays": "the live relays, shared by every tenant: a reference table",
	"idem_secrets":       "the service's secrets (the events cursor key), shared: a reference table",
	"idem_inbox": "consumer-side dedupe, keyed by (consumer, message_id) in the consumer's database: " +
		"co-located with the consumer's own rows, not with idem's tenants",
	"idem_migrations": "the schema's version, one row per migration: a reference table",
	"idem_webhook_endpoints": "primary key (id), a random endpoint id the tenant's routes filter by tenant too; " +
		"distributed by tenant it needs the key (tenant, id)",
	"idem_webhook_deliveries": "primary key (endpoint_id, event_id): the deliverer claims due deliveries across tenants; " +
		"distributed by tenant it needs the tenant first and the deliverer a claim per node",
	"idem_webhook_attempts": "primary key (id), the attempts log read by endpoint: distributed by tenant it needs (tenant, id)",
}

// TestSchemaKeysLeadWithTenant checks every primary key and unique
// constraint (and unique index) of the migrated schema.
func TestSchemaKeysLeadWithTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := migratedConn(t)
	rows, err := conn.Query(ctx, `
SELECT c.relname, i.relname,
       array_agg(a.attname::text ORDER BY k.n)
  FROM pg_index x
  JOIN pg_class c ON c.oid = x.indrelid
  JOIN pg_class i ON i.oid = x.indexrelid
  JOIN pg_namespace ns ON ns.oid = c.relnamespace AND ns.nspname = current_schema()
  CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
 WHERE x.indisunique AND c.relkind IN ('r', 'p')
 GROUP BY c.relname, i.relname
 ORDER BY c.relname, i.relname`)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		table, index string
		cols         []string
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (key, error) {
		var k key
		return k, r.Scan(&k.table, &k.index, &k.cols)
	})
	if err != nil {
		t.Fatal(err)
	}
	tables := map[string]bool{}
	for _, k := range keys {
		tables[k.table] = true
		if slices.Contains(tenantColumns, k.cols[0]) {
			continue
		}
		if _, ok := notByTenant[k.table]; !ok {
			t.Errorf("%s's unique index %s is on (%s), which does not lead with the tenant: "+
				"lead with it, or list the table in notByTenant with the reason and say so in docs/architecture.md, \"Past one primary\"",
				k.table, k.index, strings.Join(k.cols, ", "))
		}
	}
	for table := range notByTenant {
		if !tables[table] {
			t.Errorf("notByTenant lists %s, which has no unique index in the schema: remove it", table)
		}
	}
	for _, must := range []string{"idem_keys", "ledger_accounts", "ledger_transfers", "ledger_entries", "ledger_reversed_totals", "idem_outbox_holds"} {
		if !tables[must] {
			t.Errorf("no unique index found on %s: the check read the wrong schema", must)
		}
	}
}

// distHotPath are the statements of a request's transaction: the keeper's
// claim, read and stored answer, the ledger's lock, read and write, and the
// outbox's insert.
var distHotPath = map[string]string{
	"sqlKeyClaim":             sqlKeyClaim,
	"sqlKeyGet":               sqlKeyGet,
	"sqlKeyGetKept":           sqlKeyGetKept,
	"sqlKeyRecord":            sqlKeyRecord,
	"sqlKeyClaimBatch":        sqlKeyClaimBatch,
	"sqlKeyGetBatch":          sqlKeyGetBatch,
	"sqlKeyRecordBatch":       sqlKeyRecordBatch,
	"sqlLedgerAccountGet":     sqlLedgerAccountGet,
	"sqlLedgerLockAccounts":   sqlLedgerLockAccounts,
	"sqlLedgerLockAccountsOf": sqlLedgerLockAccountsOf,
	"sqlLedgerTransfersGet":   sqlLedgerTransfersGet,
	"sqlLedgerWrite":          sqlLedgerWrite,
	"sqlOutboxInsert":         sqlOutboxInsert,
}

// TestHotPathFindsRowsByTenant explains each hot-path statement under its
// generic plan (the one a prepared statement gets whatever its values),
// with sequential scans priced out, and checks that every index it reads
// or arbitrates conflicts on leads with the tenant, and that it scans no
// tenant table whole.
func TestHotPathFindsRowsByTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := migratedConn(t)
	leading := map[string]string{} // index → its first column
	rows, err := conn.Query(ctx, `
SELECT i.relname, a.attname FROM pg_index x
  JOIN pg_class i ON i.oid = x.indexrelid
  JOIN pg_namespace ns ON ns.oid = i.relnamespace AND ns.nspname = current_schema()
  JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0]`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var index, col string
		if err := rows.Scan(&index, &col); err != nil {
			t.Fatal(err)
		}
		leading[index] = col
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`\$([0-9]+)`)
	names := make([]string, 0, len(distHotPath))
	for name := range distHotPath {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		sql := distHotPath[name]
		n := 0
		for _, m := range param.FindAllStringSubmatch(sql, -1) {
			v, _ := strconv.Atoi(m[1])
			n = max(n, v)
		}
		plan := distPlan(t, conn, name, sql, n)
		indexes, seqScans := distIndexes(plan)
		t.Logf("%s: indexes %v", name, indexes)
		for _, rel := range seqScans {
			if _, ok := notByTenant[rel]; !ok {
				t.Errorf("%s scans %s whole under its generic plan: it must find its rows by tenant", name, rel)
			}
		}
		for _, ix := range indexes {
			col, ok := leading[ix]
			if !ok {
				t.Errorf("%s uses index %s, not found in the schema", name, ix)
				continue
			}
			if !slices.Contains(tenantColumns, col) {
				t.Errorf("%s uses index %s, which leads with %s, not the tenant", name, ix, col)
			}
		}
		if len(indexes) == 0 && !strings.HasPrefix(strings.TrimSpace(sql), "INSERT INTO idem_outbox ") {
			t.Errorf("%s uses no index under its generic plan; the check would pass on nothing", name)
		}
	}
}

// distPlan returns the JSON plan PostgreSQL gives sql prepared, under
// plan_cache_mode force_generic_plan, with n parameters all NULL (a
// generic plan does not look at them).
func distPlan(t *testing.T, conn *pgxpool.Conn, name, sql string, n int) any {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	stmt := "idem_plan_" + strings.ToLower(name)
	if _, err := tx.Exec(ctx, "PREPARE "+stmt+" AS "+sql); err != nil {
		t.Fatalf("%s: prepare: %v", name, err)
	}
	args := strings.TrimSuffix(strings.Repeat("NULL, ", n), ", ")
	explain := "EXPLAIN (FORMAT JSON) EXECUTE " + stmt
	if n > 0 {
		explain += "(" + args + ")"
	}
	var out []byte
	if err := tx.QueryRow(ctx, explain, pgx.QueryExecModeSimpleProtocol).Scan(&out); err != nil {
		t.Fatalf("%s: %s: %v", name, explain, err)
	}
	var plan any
	if err := json.Unmarshal(out, &plan); err != nil {
		t.Fatal(err)
	}
	return plan
}

// distIndexes returns the indexes a plan reads or arbitrates conflicts on,
// and the relations it scans sequentially.
func distIndexes(plan any) (indexes, seqScans []string) {
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			if ix, ok := v["Index Name"].(string); ok {
				indexes = append(indexes, ix)
			}
			if arb, ok := v["Conflict Arbiter Indexes"].([]any); ok {
				for _, a := range arb {
					indexes = append(indexes, fmt.Sprint(a))
				}
			}
			if v["Node Type"] == "Seq Scan" {
				seqScans = append(seqScans, fmt.Sprint(v["Relation Name"]))
			}
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(plan)
	return indexes, seqScans
}
