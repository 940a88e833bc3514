package hal

import (
	"math"
	"math/bits"
	"strings"
	"testing"
)

// Offsets and sizes near 2^63 and 2^64 reach the simulator from another
// process (a copy's device address) or a script; the range check must not
// wrap on them.
func TestAccessNearTheTopOfTheRange(t *testing.T) {
	c := openSim(t, "a2a3sim", 1)
	a := mustMalloc(t, c, 1000)
	mustMalloc(t, c, 1000) // a neighbour an overrun could otherwise reach
	cases := []struct {
		ptr  uint64
		n    int
		want string // "" when the access is inside the allocation
	}{
		{a, 1000, ""},
		{a + 1000, 0, ""},
		{a + 999, 1, ""},
		{a + 1, math.MaxInt, "overruns"},
		{a + 999, math.MaxInt, "overruns"},
		{a, math.MaxInt, "overruns"},
		{a + 1001, 0, "overruns"}, // in the padding: the span, not the size
		{1 << 63, 1, "outside any live allocation"},
		{1<<63 - 1, math.MaxInt, "outside any live allocation"},
		{math.MaxUint64, 1, "outside any live allocation"},
		{math.MaxUint64, 0, "outside any live allocation"},
		{a - 1, 2, "outside any live allocation"},
	}
	for _, k := range cases {
		_, err := c.Bytes(k.ptr, k.n)
		switch {
		case k.want == "" && err != nil:
			t.Errorf("Bytes(%#x, %d): %v", k.ptr, k.n, err)
		case k.want != "" && (err == nil || !strings.Contains(err.Error(), k.want)):
			t.Errorf("Bytes(%#x, %d) = %v, want an error saying %q", k.ptr, k.n, err, k.want)
		}
	}
}

// FuzzSimChipAccess checks the region check against arithmetic that cannot
// wrap: an access succeeds exactly when [ptr, ptr+n) lies in the first
// size bytes of the allocation.
func FuzzSimChipAccess(f *testing.F) {
	p, err := Lookup("a2a3sim")
	if err != nil {
		f.Fatal(err)
	}
	chip, err := p.OpenChip(2)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { chip.Close() })
	const size = 1000
	start, err := chip.Malloc(size)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []struct {
		ptr uint64
		n   int
	}{{start, size}, {start + size, 0}, {start + 1, math.MaxInt}, {math.MaxUint64, 1}, {1 << 63, 1 << 62}, {start - 1, 1}} {
		f.Add(s.ptr, s.n)
	}
	f.Fuzz(func(t *testing.T, ptr uint64, n int) {
		b, err := chip.Bytes(ptr, n)
		end, carry := bits.Add64(ptr, uint64(n), 0)
		want := n >= 0 && ptr >= start && carry == 0 && end <= start+size
		if want != (err == nil) {
			t.Fatalf("Bytes(%#x, %d) = %v; want success %v", ptr, n, err, want)
		}
		if err == nil && len(b) != n {
			t.Fatalf("Bytes(%#x, %d) returned %d bytes", ptr, n, len(b))
		}
	})
}
