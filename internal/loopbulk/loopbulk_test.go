package loopbulk

import (
	"testing"

	"simpler/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// Each send is acknowledged once all of it arrived, larger than the
// reader's buffer too; closing ends the reader cleanly.
func TestSendIsAcknowledged(t *testing.T) {
	for _, size := range []int{1, 3<<20 + 7} {
		c, err := Dial(size)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if err := c.Send(); err != nil {
				t.Fatalf("size %d, send %d: %v", size, i, err)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatalf("size %d: close: %v", size, err)
		}
	}
}
