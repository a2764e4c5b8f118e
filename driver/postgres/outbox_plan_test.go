package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
)

// The relay's writes run under generic plans (generic in the driver):
// planned once per connection, blind to the ids array's length, each must
// still reach its rows through the primary key in a full outbox.
func TestOutboxMarkPlansUseTheID(t *testing.T) {
	t.Parallel()
	conn := migratedConn(t)
	seed(t, conn, `INSERT INTO idem_outbox (id, tenant, type, okey, shard, payload, created_at)
		 SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(i), 12, '0'))::uuid, 't', 'x', 'k' || i, i % 64, '\x7b7d', now()
		   FROM generate_series(1, 20000) i`, `ANALYZE idem_outbox`)
	const ids = `'{00000000-0000-7000-8000-000000000007,00000000-0000-7000-8000-000000000009}'`
	for _, c := range []planCase{
		{"mark sent", sqlOutboxMarkSent, ids + `, now()`},
		{"fail", sqlOutboxFailRow, `'00000000-0000-7000-8000-000000000007', 1, 'e', false, now()`},
	} {
		if text := genericPlan(t, conn, "idem_outbox", c); !strings.Contains(text, "idem_outbox_pkey") {
			t.Errorf("%s: the plan does not use the primary key:\n%s", c.name, text)
		}
	}
}

// The backlog's figures (the relay reads them every five seconds for its
// metrics) come from the pending and dead partial indexes even when the
// statistics still count a backlog the relay has drained: planned from
// them, the statement read every block of the table through the block-range
// index on sent_at, or the whole table in sequence.
func TestOutboxStatsReadThePartialIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := oneConnDriver(t)
	for _, sql := range []string{
		`ALTER TABLE idem_outbox SET (autovacuum_enabled = false)`,
		`INSERT INTO idem_outbox (id, tenant, type, okey, shard, payload, created_at)
		 SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(i), 12, '0'))::uuid, 't', 'x', 'k' || i, i % 64, '\x7b7d',
		        now() - interval '1 hour'
		   FROM generate_series(1, 40000) i`,
		`ANALYZE idem_outbox`, // a backlog of 40,000, as far as the planner will know
		`UPDATE idem_outbox SET sent_at = now() WHERE okey <> 'k7'`,
		`UPDATE idem_outbox SET dead_at = now() WHERE okey = 'k9'`,
	} {
		if _, err := d.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	explainIn := func(tx driver.Tx, steps ...step) string {
		t.Helper()
		var text string
		steps = append(steps, step{sql: "EXPLAIN " + sqlOutboxStats, read: func(rows driver.Rows) error {
			var lines []string
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					return err
				}
				lines = append(lines, line)
			}
			text = strings.Join(lines, "\n")
			return nil
		}})
		if err := pipeline(ctx, tx, steps...); err != nil {
			t.Fatal(err)
		}
		return text
	}
	explain := func(steps ...step) string { t.Helper(); return explainIn(d.Reader(), steps...) }
	wide := func(plan string) bool {
		return strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "idem_outbox_sent_at")
	}
	// The statistics mislead the plan as they did in production's shape.
	if plan := explain(); !wide(plan) {
		t.Fatalf("the seed no longer misleads the planner; the test checks nothing:\n%s", plan)
	}
	// Planned as OutboxStats plans it, on the Reader's implicit transaction.
	if plan := explain(unread(sqlOutboxStatsPlan)); wide(plan) {
		t.Errorf("the stats read more than the partial indexes:\n%s", plan)
	}
	// The settings end with that transaction: the next statement on the
	// connection is planned as usual.
	if plan := explain(); !wide(plan) {
		t.Errorf("the planner settings outlived the statement:\n%s", plan)
	}

	s, err := d.OutboxStats(ctx, d.Reader())
	if err != nil {
		t.Fatal(err)
	}
	if s.Unsent != 1 || s.Dead != 1 || time.Since(s.OldestUnsent) < 59*time.Minute {
		t.Errorf("stats = %+v, want one unsent an hour old and one dead", s)
	}
	tx, err := d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	if s, err := d.OutboxStats(ctx, tx); err != nil || s.Unsent != 1 || s.Dead != 1 {
		t.Errorf("in a transaction: stats = %+v, %v; want one unsent and one dead", s, err)
	}
	// OutboxStats itself set them: they last to the end of a transaction.
	if plan := explainIn(tx); wide(plan) {
		t.Errorf("OutboxStats read more than the partial indexes:\n%s", plan)
	}
}
