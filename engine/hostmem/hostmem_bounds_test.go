package hostmem

import (
	"math"
	"testing"

	"simpler/hal/shm"
)

// Resolve takes an address and a size from anywhere (a task's tensor, a
// child's copy): near 2^63 and 2^64 neither may wrap the range check.
func TestResolveNearTheTop(t *testing.T) {
	seg := &shm.Segment{Name: "simpler-1-bounds", Mem: make([]byte, 4096)} // Go memory: nothing to unlink
	Register(seg)
	defer Unregister(seg)
	a := seg.Addr()
	cases := []struct {
		addr uint64
		size int
		ok   bool
	}{
		{a, 4096, true},
		{a + 4095, 1, true},
		{a + 4096, 0, false}, // one past the end is in no segment
		{a + 4095, 2, false},
		{a, math.MaxInt, false},
		{a + 1, math.MaxInt, false}, // addr+size would wrap past 2^64
		{math.MaxUint64, 1, false},
		{math.MaxUint64, math.MaxInt, false},
		{1 << 63, 1, false},
		{a - 1, 2, false},
		{a, -1, false},
	}
	for _, c := range cases {
		b, err := Resolve(c.addr, c.size)
		if c.ok != (err == nil) || (err == nil && len(b) != c.size) {
			t.Errorf("Resolve(%#x, %d) = %d bytes, %v; want ok %v", c.addr, c.size, len(b), err, c.ok)
		}
	}
	if _, off, ok := Locate(a + 4095); !ok || off != 4095 {
		t.Errorf("Locate of the last byte: %d, %v", off, ok)
	}
	if _, _, ok := Locate(math.MaxUint64); ok {
		t.Error("Locate(2^64-1) found a segment")
	}
}
