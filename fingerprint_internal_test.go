package idem

import (
	"bytes"
	"fmt"
	"testing"
)

// The memo answers exactly what Fingerprint answers, also once slots are
// reused by other bodies, and refuses what Fingerprint refuses.
func TestFingerprintMemo(t *testing.T) {
	t.Parallel()
	var m fingerprintMemo
	ignore := []string{"sent_at"}
	for round := range 2 {
		for i := range 3 * fingerprintMemoSlots {
			op := fmt.Sprintf("POST /v1/things/%d", i%7)
			body := []byte(fmt.Sprintf(`{"n":%d,"sent_at":"%d"}`, i, round))
			want, err := Fingerprint(op, body, ignore...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.get(op, body, ignore)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("memo of %s %s: %x, %v; want %x", op, body, got, err, want)
			}
		}
	}
	if _, err := m.get("op", []byte(`{`), nil); err == nil {
		t.Fatal("memo accepted a body Fingerprint refuses")
	}
}
