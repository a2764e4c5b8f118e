package ledger_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/ledger"
)

type timedTx struct {
	driver.Tx
	d map[string]time.Duration
}

func (c timedTx) Query(ctx context.Context, sql string, args ...any) (driver.Rows, error) {
	s := time.Now()
	r, err := c.Tx.Query(ctx, sql, args...)
	c.d[fmt.Sprintf("%.30q", sql)] += time.Since(s)
	return r, err
}
func (c timedTx) QueryRow(ctx context.Context, sql string, args ...any) driver.Row {
	s := time.Now()
	r := c.Tx.QueryRow(ctx, sql, args...)
	return timedRow{r, s, c.d, sql}
}

type timedRow struct {
	driver.Row
	s   time.Time
	d   map[string]time.Duration
	sql string
}

func (r timedRow) Scan(d ...any) error {
	err := r.Row.Scan(d...)
	r.d[fmt.Sprintf("%.30q", r.sql)] += time.Since(r.s)
	return err
}

func TestZZProf(t *testing.T) {
	d := drivertest.Open(t, "postgres")
	l, _ := ledger.New(d, ledger.Config{MaxBatch: 1000})
	ctx := context.Background()
	for i := range 10 {
		createAccount(t, d, l, tenant, usd("acct-"+strconv.Itoa(i)))
	}
	times := map[string]time.Duration{}
	var total time.Duration
	const n = 300
	for i := range n {
		s := time.Now()
		must(t, d, func(tx driver.Tx) error {
			_, err := l.Post(ctx, timedTx{tx, times}, tenant, ledger.NewTransfer{DebitAccountID: "acct-" + strconv.Itoa(i%10), CreditAccountID: "acct-" + strconv.Itoa((i+1)%10), Amount: 1, Currency: "USD"})
			return err
		})
		total += time.Since(s)
	}
	for k, v := range times {
		t.Logf("%s %v", k, v/n)
	}
	t.Logf("total %v", total/n)
}
