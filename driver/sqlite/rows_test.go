package sqlite

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
)

// A batch takes the smallest statement that holds it, padded with NULL
// rows, and past the largest, as many of the largest as it fills.
func TestEachStmt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n    int
		want []int // each statement's k
	}{
		{0, nil}, {1, []int{0}}, {2, []int{1}}, {3, []int{2}}, {8, []int{3}}, {9, []int{4}},
		{2048, []int{11}}, {2049, []int{11, 0}}, {5000, []int{11, 11, 10}},
	} {
		var ks []int
		next := 0
		err := eachStmt(c.n, 2, func(args []any, i int) []any { return append(args, i, "x") },
			func(k, lo, hi int, args []any) error {
				ks = append(ks, k)
				if lo != next || hi-lo > 1<<k || len(args) != 2<<k {
					return fmt.Errorf("rows %d..%d, %d args in a statement of %d rows", lo, hi, len(args), 1<<k)
				}
				for i := range 1 << k {
					want := []any{nil, nil} // padding
					if lo+i < hi {
						want = []any{lo + i, "x"}
					}
					if row := args[2*i : 2*i+2]; !slices.Equal(row, want) {
						return fmt.Errorf("row %d of a statement from %d: %v, want %v", i, lo, row, want)
					}
				}
				next = hi
				return nil
			})
		if err != nil || next != c.n || !slices.Equal(ks, c.want) {
			t.Errorf("%d rows: statements %v, ended at %d, %v; want %v", c.n, ks, next, err, c.want)
		}
	}
}

// Batches of every shape claim their free keys, answer the taken ones with
// their records and store every outcome; the padding writes nothing.
func TestKeyBatchSizes(t *testing.T) {
	t.Parallel()
	d, ctx := openStmtTest(t, true)
	for _, n := range []int{1, 3, 8, 9, 2049} {
		ids := keyIDs(fmt.Sprint("n", n), n)
		// Every third key is taken by a live record of its own already.
		var taken []driver.KeyID
		for i := 0; i < n; i += 3 {
			taken = append(taken, ids[i])
		}
		if err := claimAndRecord(ctx, d, taken); err != nil {
			t.Fatal(err)
		}
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		p := &driver.KeyClaimBatchParams{Now: now, ExpiresAt: now.Add(time.Hour)}
		for _, id := range ids {
			p.Claims = append(p.Claims, driver.KeyClaimItem{ID: id, Fingerprint: []byte("fp2")})
		}
		res, err := d.KeyClaimBatch(ctx, tx, p)
		if err != nil {
			t.Fatal(err)
		}
		var rec driver.KeyRecordBatchParams
		for i, r := range res {
			switch {
			case i%3 == 0 && (r.Claimed || r.Existing == nil || string(r.Existing.Body) != ids[i].Key):
				t.Fatalf("%d keys: taken key %d: %+v", n, i, r)
			case i%3 != 0 && !r.Claimed:
				t.Fatalf("%d keys: free key %d not claimed", n, i)
			case r.Claimed:
				rec.Records = append(rec.Records, driver.KeyRecordParams{ID: ids[i], Status: 200, Body: []byte("new " + ids[i].Key)})
			}
		}
		if err := d.KeyRecordBatch(ctx, tx, &rec); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		var count int
		if err := d.Reader().QueryRow(ctx, `SELECT count(*) FROM idem_keys WHERE key LIKE ?1`, fmt.Sprintf("n%d-%%", n)).Scan(&count); err != nil {
			t.Fatal(err)
		}
		if count != n {
			t.Fatalf("%d keys: %d rows", n, count)
		}
		for i, id := range ids {
			got, err := d.KeyGet(ctx, d.Reader(), &driver.KeyGetParams{ID: id})
			if err != nil {
				t.Fatal(err)
			}
			want, fp := "new "+id.Key, "fp2"
			if i%3 == 0 {
				want, fp = id.Key, "fp"
			}
			if string(got.Body) != want || string(got.Fingerprint) != fp {
				t.Fatalf("%d keys: key %d holds %q %q, want %q %q", n, i, got.Body, got.Fingerprint, want, fp)
			}
		}
	}
}
