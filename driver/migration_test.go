package driver_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/idemhq/idem/driver"
)

func TestLoadMigrations(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	cases := []struct {
		name  string
		files fstest.MapFS
		want  string // error substring, or "" for success
	}{
		{"ordered", fstest.MapFS{"m/002_b.sql": file("B"), "m/001_a.sql": file("A"), "m/README": file("x")}, ""},
		{"gap", fstest.MapFS{"m/001_a.sql": file("A"), "m/003_c.sql": file("C")}, "gap"},
		{"not from one", fstest.MapFS{"m/002_b.sql": file("B")}, "gap"},
		{"repeat", fstest.MapFS{"m/001_a.sql": file("A"), "m/001_b.sql": file("B")}, "share a version"},
		{"bad name", fstest.MapFS{"m/one.sql": file("A")}, "NNN_name"},
		{"bad number", fstest.MapFS{"m/x_a.sql": file("A")}, "not a positive number"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ms, err := driver.LoadMigrations(c.files, "m")
			if c.want == "" {
				if err != nil || len(ms) != 2 || ms[0].SQL != "A" || ms[1].Version != 2 {
					t.Fatalf("got %+v, %v", ms, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}
