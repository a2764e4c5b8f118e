package postgres

import (
	"context"
	"strings"
	"testing"
)

// The deliverer's step runs under custom (driver/postgres/tx.go): its
// claim must read the due index in its order up to the LIMIT, and its
// records must find their deliveries through the primary key, however
// far the backlog has grown past what the planner's statistics saw.
// Planned from a small table's statistics, or none, they read every due
// row of a backlog by a bitmap or sequential scan, hashed them with their
// endpoints and sorted them, in each claim and each record.
func TestWebhookStepPlansReadOnlyWhatTheyWant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := migratedConn(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`ALTER TABLE idem_webhook_deliveries SET (autovacuum_enabled = false)`)
	exec(`INSERT INTO idem_webhook_endpoints (id, tenant, url, description, event_types, enabled, secrets, rate_limit,
	                                         created_at, updated_at)
	      SELECT 'ep' || i, 't', 'https://example.com/' || i, '', '[]', true, '[]', 0, now(), now()
	        FROM generate_series(1, 3) i`)
	deliveries := func(from, to int, state string) {
		exec(`INSERT INTO idem_webhook_deliveries (endpoint_id, event_id, tenant, type, payload, event_created_at, state,
		                                          next_at, created_at, updated_at, sealed)
		      SELECT 'ep' || (1 + i % 3), 'ev' || lpad(i::text, 8, '0'), 't', 'transfer.created', '\x7b7d', now(), $3,
		             now() - interval '1 hour' + i * interval '1 ms', now(), now(), false
		        FROM generate_series($1::int, $2::int) i`, from, to, state)
	}
	// A backlog the planner's statistics have not seen (none yet, as in a
	// new deployment's first burst): its statements are planned blind.
	deliveries(1, 2000, "delivered")
	deliveries(2001, 8000, "pending")
	exec(`UPDATE idem_webhook_deliveries SET owner = 'me', next_at = now() + interval '1 minute'
	       WHERE event_id BETWEEN 'ev00003000' AND 'ev00003027'`)

	// EXECUTE takes no subqueries: the keys are read first.
	var endpoints, events string
	if err := conn.QueryRow(ctx, `SELECT array_agg(endpoint_id ORDER BY event_id)::text, array_agg(event_id ORDER BY event_id)::text
	                                FROM idem_webhook_deliveries WHERE owner = 'me'`).Scan(&endpoints, &events); err != nil {
		t.Fatal(err)
	}
	n := `array_fill(1, ARRAY[28])`
	texts := `array_fill(''::text, ARRAY[28])`
	for _, s := range []struct{ name, sql, args string }{
		{"claim", sqlWebhookDeliveryClaim,
			`now(), '{}', '{ep1}', '{4}', 200, 128, 100, now() + interval '1 minute', 'other'`},
		{"finish", sqlWebhookDeliveryFinish,
			`'` + endpoints + `', '` + events + `', array_fill('delivered'::text, ARRAY[28]), ` + n + `,
			 array_fill(now(), ARRAY[28]), array_fill(204, ARRAY[28]), ` + texts + `, array_fill(3::bigint, ARRAY[28]), ` + texts + `,
			 now(), 'me'`},
		{"release", sqlWebhookDeliveryRelease, `'` + endpoints + `', '` + events + `', now(), 'me'`},
	} {
		text := planUnder(t, conn.Conn(), sqlCustomOn, s.sql, s.args)
		if strings.Contains(text, "Bitmap") || strings.Contains(text, "Seq Scan on idem_webhook_deliveries") ||
			strings.Contains(text, "Sort Key: d_1.next_at") || strings.Contains(text, "Rows Removed by Join Filter") {
			t.Errorf("%s: the plan reads more of the backlog than it wants:\n%s", s.name, text)
		}
	}
}
