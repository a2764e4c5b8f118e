package postgres

import (
	"strings"
	"testing"
)

// The relay's writes run under generic plans (driver.BeginOptions.GenericPlans):
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
