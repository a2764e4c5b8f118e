package main

import (
	"os"
	"strings"
	"testing"
)

// The ceiling's script becomes its one statement, with pgbench's variables
// as parameters and its casts and JSON left as they are.
func TestPgbenchStatement(t *testing.T) {
	src, err := os.ReadFile("../pgbench/transfer_one_statement.sql")
	if err != nil {
		t.Fatal(err)
	}
	sql, err := pgbenchStatement(string(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"'one-' || $1::bigint", "'acc-' || $2::bigint", "'acc-' || $3::bigint",
		"($1::bigint::bigint % 64)::integer", `"Location":["/v1/transfers/x"]`,
	} {
		if !strings.Contains(sql, want) {
			t.Errorf("statement lacks %q:\n%s", want, sql)
		}
	}
	for _, gone := range []string{":k", ":a ", "\\set", "-- ", ";"} {
		if strings.Contains(sql, gone) {
			t.Errorf("statement still has %q:\n%s", gone, sql)
		}
	}
	if _, err := pgbenchStatement("SELECT :k;\nSELECT :a;"); err == nil {
		t.Error("two statements: no error")
	}
}
