package idemhttp

import (
	"strconv"
	"testing"
)

// isLength accepts exactly strconv.Itoa's spelling of the length.
func TestIsLength(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 9, 10, 99, 100, 123456} {
		if !isLength(strconv.Itoa(n), n) {
			t.Errorf("isLength(%q, %d) = false", strconv.Itoa(n), n)
		}
	}
	for _, tc := range []struct {
		v string
		n int
	}{{"", 0}, {"-0", 0}, {"+5", 5}, {"05", 5}, {"00", 0}, {"5 ", 5}, {"6", 5}, {"1e2", 100}} {
		if isLength(tc.v, tc.n) {
			t.Errorf("isLength(%q, %d) = true", tc.v, tc.n)
		}
	}
}
