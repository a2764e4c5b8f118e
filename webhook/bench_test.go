package webhook

import (
	"bytes"
	"fmt"
	"testing"
)

// BenchmarkVerify measures one Verify per profile on a 2 KiB body with
// two configured secrets, the delivery signed by the second (the worst case
// during a rotation: the first key is tried and misses).
func BenchmarkVerify(b *testing.B) {
	for _, c := range profileCases() {
		b.Run(c.name, func(b *testing.B) {
			v := mustVerifier(b, c.ep)
			body := c.body("evt_1NG8Du2eZvKYlo2CWNg4Qsr9")
			// Pad the body inside its JSON object to about 2 KiB.
			pad := fmt.Sprintf(`{"padding":%q,`, bytes.Repeat([]byte("x"), 2048-len(body)))
			body = append([]byte(pad), body[1:]...)
			d := delivery{body: body, ts: t0, id: "evt_1NG8Du2eZvKYlo2CWNg4Qsr9"}
			h := c.sign(c.ep.Secrets[1:], d)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(h, body, t0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
