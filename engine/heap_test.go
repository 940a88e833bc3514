package engine

import (
	"slices"
	"testing"

	"simpler/engine/hostmem"
	"simpler/hal/shm"
)

func newRing(t *testing.T, size int) *heapRing {
	t.Helper()
	r := newHeapRing(size)
	t.Cleanup(func() {
		if err := r.close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return r
}

// mustBlock allocates n bytes and checks the block's offset.
func mustBlock(t *testing.T, r *heapRing, n, wantOff int) *heapBlock {
	t.Helper()
	b, err := r.alloc(n)
	if err != nil || b == nil {
		t.Fatalf("alloc(%d): block %v, err %v", n, b, err)
	}
	if b.off != wantOff || b.addr != r.seg.Addr()+uint64(wantOff) {
		t.Fatalf("alloc(%d) at offset %d, want %d", n, b.off, wantOff)
	}
	return b
}

func mustFull(t *testing.T, r *heapRing, n int) {
	t.Helper()
	if b, err := r.alloc(n); b != nil || err != nil {
		t.Fatalf("alloc(%d) on a full ring: block %+v, err %v; want nil, nil", n, b, err)
	}
}

func TestHeapAllocOrderAndAlignment(t *testing.T) {
	r := newRing(t, 1024)
	a := mustBlock(t, r, 100, 0) // rounded up to 128
	b := mustBlock(t, r, 1, 128) // at least one 64-byte unit
	c := mustBlock(t, r, 0, 192)
	if a.size != 128 || b.size != 64 || c.size != 64 || r.used != 256 {
		t.Fatalf("sizes %d %d %d used %d", a.size, b.size, c.size, r.used)
	}
	r.unref(a)
	r.unref(b)
	if r.used != 64 || len(r.blocks) != 1 || r.blocks[0] != c {
		t.Fatalf("after freeing the two oldest: used %d, %d live blocks", r.used, len(r.blocks))
	}
	r.unref(c)
	if r.used != 0 || r.blocks != nil || r.head != 0 {
		t.Fatalf("empty ring: used %d blocks %v head %d", r.used, r.blocks, r.head)
	}
	mustBlock(t, r, 64, 0) // an empty ring starts over at 0
}

func TestHeapRefsKeepBlockLive(t *testing.T) {
	r := newRing(t, 256)
	a := mustBlock(t, r, 64, 0)
	a.refs++ // a task holds it as well as its scope
	r.unref(a)
	if a.freed || r.used != 64 || r.find(a.addr, 64) != a {
		t.Fatal("block freed while a task still refers to it")
	}
	r.unref(a)
	if !a.freed || r.used != 0 || r.find(a.addr, 64) != nil {
		t.Fatal("block not freed after its last reference")
	}
}

func TestHeapWrapAround(t *testing.T) {
	r := newRing(t, 256)
	a := mustBlock(t, r, 128, 0)
	b := mustBlock(t, r, 128, 128)
	mustFull(t, r, 64)
	r.unref(a)
	c := mustBlock(t, r, 64, 0) // wraps into the space a left
	d := mustBlock(t, r, 64, 64)
	mustFull(t, r, 64) // wrapped: the gap up to b is used up
	r.unref(b)         // c is now the oldest; the end of the ring is free
	e := mustBlock(t, r, 128, 128)
	for _, x := range []*heapBlock{c, d, e} {
		r.unref(x)
	}
	if r.used != 0 || len(r.blocks) != 0 {
		t.Fatalf("used %d, %d blocks after freeing all", r.used, len(r.blocks))
	}
}

func TestHeapOutOfOrderFreeWaitsForOlder(t *testing.T) {
	r := newRing(t, 256)
	a := mustBlock(t, r, 64, 0)
	b := mustBlock(t, r, 64, 64)
	c := mustBlock(t, r, 128, 128)
	r.unref(b) // freed, but a is older and live
	if r.used != 192 || len(r.blocks) != 3 {
		t.Fatalf("used %d, %d blocks", r.used, len(r.blocks))
	}
	mustFull(t, r, 64) // b's space is not reused while a lives
	r.unref(a)         // now a and b are reclaimed together
	if len(r.blocks) != 1 || r.blocks[0] != c {
		t.Fatalf("%d live blocks after freeing the oldest", len(r.blocks))
	}
	mustBlock(t, r, 128, 0)
}

func TestHeapZeroesReusedMemory(t *testing.T) {
	r := newRing(t, 128)
	a := mustBlock(t, r, 64, 0)
	for i := range r.seg.Mem[:64] {
		r.seg.Mem[i] = 0xff
	}
	r.unref(a)
	mustBlock(t, r, 64, 0)
	if slices.ContainsFunc(r.seg.Mem[:64], func(x byte) bool { return x != 0 }) {
		t.Fatal("reused block is not zeroed")
	}
}

func TestHeapFind(t *testing.T) {
	r := newRing(t, 512)
	if r.find(0x1000, 1) != nil {
		t.Fatal("find before the segment exists")
	}
	a := mustBlock(t, r, 128, 0)
	b := mustBlock(t, r, 128, 128)
	cases := []struct {
		addr uint64
		n    int
		want *heapBlock
	}{
		{a.addr, 128, a},       // start
		{a.addr + 8, 16, a},    // interior
		{b.addr - 1, 1, a},     // last byte of a
		{b.addr, 4, b},         // start of the newer block
		{b.addr + 64, 64, b},   // interior, up to the end
		{b.addr - 1, 2, nil},   // straddles a and b
		{b.addr + 1, 128, nil}, // overruns b
		{b.addr + 128, 4, nil}, // free space in the segment
		{a.addr - 64, 4, nil},  // before the segment
		{a.addr + 512, 4, nil}, // after the segment
	}
	for _, c := range cases {
		if got := r.find(c.addr, c.n); got != c.want {
			t.Errorf("find(base+%d, %d) = %v, want %v", int64(c.addr-a.addr), c.n, got, c.want)
		}
	}
	r.unref(b)
	if r.find(b.addr, 4) != nil || r.find(b.addr+8, 4) != nil {
		t.Fatal("find returns a freed block")
	}
}

func TestHeapExhaustionAndOversize(t *testing.T) {
	r := newRing(t, 256)
	mustBlock(t, r, 256, 0)
	mustFull(t, r, 1)
	for _, n := range []int{257, 1 << 20} {
		b, err := r.alloc(n)
		if b != nil || KindOf(err) != ValueError {
			t.Fatalf("alloc(%d) beyond the ring: block %v, err %v; want a ValueError", n, b, err)
		}
	}
}

// A ring whose size is not a multiple of the alignment must refuse a
// request whose aligned size does not fit, not slice past the segment.
func TestHeapOversizeAfterAlignment(t *testing.T) {
	r := newRing(t, 100)
	b, err := r.alloc(90) // fits unaligned, 128 aligned
	if b != nil || KindOf(err) != ValueError {
		t.Fatalf("alloc(90) in a 100-byte ring: block %v, err %v; want a ValueError", b, err)
	}
	mustBlock(t, r, 64, 0)
}

func TestHeapCloseRemovesSegment(t *testing.T) {
	r := newHeapRing(256)
	t.Cleanup(func() { r.close() })   // idempotent; for early failures
	if err := r.close(); err != nil { // nothing allocated: nothing to close
		t.Fatal(err)
	}
	b := mustBlock(t, r, 64, 0)
	name := r.seg.Name
	if left, _ := shm.Leftovers(name); len(left) != 1 {
		t.Fatalf("segment %s not in /dev/shm: %v", name, left)
	}
	if _, err := hostmem.Resolve(b.addr, 64); err != nil {
		t.Fatalf("heap memory does not resolve: %v", err)
	}
	if err := r.close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := shm.Leftovers(name); len(left) != 0 {
		t.Fatalf("segment still present after close: %v", left)
	}
	if _, err := hostmem.Resolve(b.addr, 64); err == nil {
		t.Fatal("heap address still resolves after close")
	}
	if r.seg != nil || r.find(b.addr, 1) != nil {
		t.Fatal("closed ring still has a segment")
	}
}
