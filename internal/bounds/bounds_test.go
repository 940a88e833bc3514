package bounds

import (
	"math"
	"testing"

	"simpler/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

const (
	p63 = uint64(1) << 63
	max = math.MaxUint64
)

func TestFits(t *testing.T) {
	cases := []struct {
		off, n, size uint64
		want         bool
	}{
		{0, 0, 0, true},
		{0, 10, 10, true},
		{10, 0, 10, true},
		{11, 0, 10, false},
		{5, 6, 10, false},
		{1, max, 10, false}, // off+n wraps to 0: a naive off+n > size passes it
		{max, 1, 10, false}, // wraps to 0
		{max, max, max, false},
		{max, 0, max, true},
		{p63, p63, max, false}, // wraps to 0
		{p63, p63 - 1, max, true},
		{p63 - 1, p63, max, true},
		{p63, p63, p63, false},
		{8, max - 7, 16, false}, // wraps to 0
	}
	for _, c := range cases {
		if got := Fits(c.off, c.n, c.size); got != c.want {
			t.Errorf("Fits(%#x, %#x, %#x) = %v, want %v", c.off, c.n, c.size, got, c.want)
		}
	}
}

func TestFitsInt(t *testing.T) {
	cases := []struct {
		off, n, size int
		want         bool
	}{
		{0, 4, 4, true},
		{-1, 1, 4, false},
		{1, -1, 4, false}, // uint64(-1) would be 2^64-1
		{0, 0, -1, false},
		{math.MaxInt, math.MaxInt, math.MaxInt, false}, // the int sum is negative
		{math.MaxInt, 0, math.MaxInt, true},
		{1, math.MaxInt, math.MaxInt, false},
	}
	for _, c := range cases {
		if got := FitsInt(c.off, c.n, c.size); got != c.want {
			t.Errorf("FitsInt(%d, %d, %d) = %v, want %v", c.off, c.n, c.size, got, c.want)
		}
	}
}

func TestInside(t *testing.T) {
	top := uint64(max - 0xfff) // a region of 0x1000 bytes ending at 2^64
	cases := []struct {
		addr, n, base, size uint64
		want                bool
	}{
		{top, 0x1000, top, 0x1000, true},
		{max, 1, top, 0x1000, true},
		{max, 2, top, 0x1000, false},
		{top - 1, 1, top, 0x1000, false},
		{0, 1, top, 0x1000, false}, // addr-base would wrap to a small offset
		{p63, 1 << 62, p63, 1 << 62, true},
		{p63 + 1, 1 << 62, p63, 1 << 62, false},
	}
	for _, c := range cases {
		if got := Inside(c.addr, c.n, c.base, c.size); got != c.want {
			t.Errorf("Inside(%#x, %#x, %#x, %#x) = %v, want %v", c.addr, c.n, c.base, c.size, got, c.want)
		}
	}
}

func TestInt(t *testing.T) {
	cases := []struct {
		x    uint64
		max  int
		want int
		ok   bool
	}{
		{0, 0, 0, true},
		{5, 5, 5, true},
		{6, 5, 0, false},
		{p63, math.MaxInt, 0, false}, // int(2^63) is negative
		{p63 - 1, math.MaxInt, math.MaxInt, true},
		{max, math.MaxInt, 0, false},
		{0, -1, 0, false},
	}
	for _, c := range cases {
		got, ok := Int(c.x, c.max)
		if got != c.want || ok != c.ok {
			t.Errorf("Int(%#x, %d) = %d, %v; want %d, %v", c.x, c.max, got, ok, c.want, c.ok)
		}
	}
}

func TestProduct(t *testing.T) {
	const tib = 1 << 40
	cases := []struct {
		dims []int
		unit int
		max  int64
		want int64
		ok   bool
	}{
		{nil, 4, tib, 4, true},
		{[]int{2, 3}, 4, tib, 24, true},
		{[]int{tib}, 1, tib, tib, true},
		{[]int{tib}, 2, tib, 0, false},
		{[]int{1 << 32, 1 << 32}, 1, math.MaxInt64, 0, false}, // 2^64 wraps to 0 in int64
		{[]int{1 << 31, 1 << 31, 4}, 2, math.MaxInt64, 0, false},
		{[]int{1 << 62, 1 << 62, 0}, 8, tib, 0, true}, // a zero dimension wins
		{[]int{-1, 4}, 1, tib, 0, false},
		{[]int{-1, 0}, 1, tib, 0, true},
		{[]int{3}, 0, tib, 0, true},
		{[]int{3}, -1, tib, 0, false},
		{[]int{math.MaxInt, 2}, 1, math.MaxInt64, 0, false},
	}
	for _, c := range cases {
		got, ok := Product(c.dims, c.unit, c.max)
		if got != c.want || ok != c.ok {
			t.Errorf("Product(%v, %d, %d) = %d, %v; want %d, %v", c.dims, c.unit, c.max, got, ok, c.want, c.ok)
		}
	}
}

// FuzzFits checks the helpers against 128-bit arithmetic, which cannot
// wrap.
func FuzzFits(f *testing.F) {
	f.Add(uint64(0), uint64(0), uint64(0))
	f.Add(uint64(1), uint64(max), uint64(10))
	f.Add(p63, p63, uint64(max))
	f.Fuzz(func(t *testing.T, off, n, size uint64) {
		// off+n as a 65-bit sum: hi is the carry.
		lo := off + n
		hi := uint64(0)
		if lo < off {
			hi = 1
		}
		want := hi == 0 && lo <= size
		if got := Fits(off, n, size); got != want {
			t.Fatalf("Fits(%#x, %#x, %#x) = %v, want %v", off, n, size, got, want)
		}
		// The same range seen from a base: [base+off, base+off+n) inside
		// [base, base+size), for a base that keeps base+off from wrapping.
		base := max - off
		if got := Inside(base+off, n, base, size); got != want {
			t.Fatalf("Inside(%#x, %#x, %#x, %#x) = %v, want %v", base+off, n, base, size, got, want)
		}
	})
}
