package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
)

// KeyGetBatch on the reader reads its keys in one statement over arrays,
// under a generic plan that ends with the read: each key gets its own
// record (nil where there is none, repeats included), whatever the batch's
// size, and the connection's next statement is planned as usual.
func TestKeyGetBatchOnTheReader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := oneConnDriver(t)
	if _, err := d.pool.Exec(ctx, `INSERT INTO idem_keys (scope, operation, key, fingerprint, status, body, created_at, expires_at)
		SELECT 's', 'op', 'k' || i, '\x00', 200 + i, convert_to('body ' || i, 'UTF8'), now(), now() + interval '1 day'
		  FROM generate_series(1, 9) i`); err != nil {
		t.Fatal(err)
	}
	for n := 2; n <= 8; n++ {
		// Keys k1..kn, every third one missing (k1 → k101), and the last
		// k2 again.
		ids := make([]driver.KeyID, n)
		want := make([]int, n) // the record's number, 0 for none
		for i := range ids {
			j := i + 1
			if i == n-1 {
				j = 2
			}
			key := fmt.Sprintf("k%d", j)
			if j%3 == 1 {
				key = fmt.Sprintf("k%d", j+100)
			} else {
				want[i] = j
			}
			ids[i] = driver.KeyID{Scope: "s", Operation: "op", Key: key}
		}
		recs, err := d.KeyGetBatch(ctx, d.Reader(), &driver.KeyGetBatchParams{IDs: ids})
		if err != nil {
			t.Fatalf("%d keys: %v", n, err)
		}
		if len(recs) != n {
			t.Fatalf("%d keys: %d records", n, len(recs))
		}
		for i, rec := range recs {
			switch {
			case want[i] == 0 && rec != nil:
				t.Errorf("%d keys: record %d: %+v, want none", n, i, rec)
			case want[i] == 0:
			case rec == nil || rec.ID != ids[i] || rec.Status != 200+want[i] || string(rec.Body) != fmt.Sprintf("body %d", want[i]) ||
				!rec.ExpiresAt.After(rec.CreatedAt) || time.Since(rec.CreatedAt) > time.Hour:
				t.Errorf("%d keys: record %d: %+v, want k%d's", n, i, rec, want[i])
			}
		}
		var mode string
		if err := d.pool.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode); err != nil || mode != "auto" {
			t.Errorf("%d keys: plan_cache_mode after the read = %q, %v; want auto", n, mode, err)
		}
	}
}
