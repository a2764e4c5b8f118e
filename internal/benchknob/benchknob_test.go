package benchknob

import (
	"slices"
	"testing"
)

func TestParseAndUnknown(t *testing.T) {
	got := parse(" read-first, coalesce ,,replay-cache")
	if len(got) != 3 || !got["read-first"] || !got["coalesce"] || !got["replay-cache"] {
		t.Fatalf("parse: %v", got)
	}
	if len(parse("")) != 0 {
		t.Fatal("an empty variable turns something off")
	}
	saved := off
	defer func() { off = saved }()
	off = parse("read-first,groupcommit,memo,cache")
	if bad := Unknown(); !slices.Equal(bad, []string{"cache", "groupcommit", "memo"}) {
		t.Fatalf("unknown: %v", bad)
	}
	if !Off("read-first") || Off("coalesce") {
		t.Fatal("Off does not answer what the variable names")
	}
}
