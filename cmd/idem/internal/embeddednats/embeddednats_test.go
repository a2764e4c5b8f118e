package embeddednats

import (
	"strings"
	"testing"
)

// One data directory, one server: a second is refused until the first stops.
func TestDataDirIsExclusive(t *testing.T) {
	dir := t.TempDir()
	first, err := Start(Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Start(Config{DataDir: dir}); err == nil || !strings.Contains(err.Error(), "in use") {
		first.Shutdown()
		t.Fatalf("second server on %s: %v, want refused", dir, err)
	}
	first.Shutdown()
	again, err := Start(Config{DataDir: dir})
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	again.Shutdown()
}
