package engine

import (
	"sync/atomic"
	"testing"

	"simpler/hal/dtype"

	"simpler/engine/hostmem"
	"simpler/hal/shm"
)

// u is one unit of heap alignment.
const u = heapAlign

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
	r := newRing(t, 16*u)
	a := mustBlock(t, r, u+100, 0) // rounded up to two units
	b := mustBlock(t, r, 1, 2*u)   // at least one 1024-byte unit
	c := mustBlock(t, r, 0, 3*u)
	if a.size != 2*u || b.size != u || c.size != u || r.used != 4*u {
		t.Fatalf("sizes %d %d %d used %d", a.size, b.size, c.size, r.used)
	}
	r.unref(a)
	r.unref(b)
	if r.used != u || len(r.blocks) != 1 || r.blocks[0] != c {
		t.Fatalf("after freeing the two oldest: used %d, %d live blocks", r.used, len(r.blocks))
	}
	r.unref(c)
	if r.used != 0 || r.blocks != nil || r.head != 0 {
		t.Fatalf("empty ring: used %d blocks %v head %d", r.used, r.blocks, r.head)
	}
	mustBlock(t, r, u, 0) // an empty ring starts over at 0
}

func TestHeapRefsKeepBlockLive(t *testing.T) {
	r := newRing(t, 4*u)
	a := mustBlock(t, r, u, 0)
	a.refs++ // a task holds it as well as its scope
	r.unref(a)
	if a.freed || r.used != u || r.find(a.addr, u) != a {
		t.Fatal("block freed while a task still refers to it")
	}
	r.unref(a)
	if !a.freed || r.used != 0 || r.find(a.addr, u) != nil {
		t.Fatal("block not freed after its last reference")
	}
}

func TestHeapWrapAround(t *testing.T) {
	r := newRing(t, 4*u)
	a := mustBlock(t, r, 2*u, 0)
	b := mustBlock(t, r, 2*u, 2*u)
	mustFull(t, r, u)
	r.unref(a)
	c := mustBlock(t, r, u, 0) // wraps into the space a left
	d := mustBlock(t, r, u, u)
	mustFull(t, r, u) // wrapped: the gap up to b is used up
	r.unref(b)        // c is now the oldest; the end of the ring is free
	e := mustBlock(t, r, 2*u, 2*u)
	for _, x := range []*heapBlock{c, d, e} {
		r.unref(x)
	}
	if r.used != 0 || len(r.blocks) != 0 {
		t.Fatalf("used %d, %d blocks after freeing all", r.used, len(r.blocks))
	}
}

func TestHeapOutOfOrderFreeWaitsForOlder(t *testing.T) {
	r := newRing(t, 4*u)
	a := mustBlock(t, r, u, 0)
	b := mustBlock(t, r, u, u)
	c := mustBlock(t, r, 2*u, 2*u)
	r.unref(b) // freed, but a is older and live
	if r.used != 3*u || len(r.blocks) != 3 {
		t.Fatalf("used %d, %d blocks", r.used, len(r.blocks))
	}
	mustFull(t, r, u) // b's space is not reused while a lives
	r.unref(a)        // now a and b are reclaimed together
	if len(r.blocks) != 1 || r.blocks[0] != c {
		t.Fatalf("%d live blocks after freeing the oldest", len(r.blocks))
	}
	mustBlock(t, r, 2*u, 0)
}

func TestHeapFind(t *testing.T) {
	r := newRing(t, 8*u)
	if r.find(0x1000, 1) != nil {
		t.Fatal("find before the segment exists")
	}
	a := mustBlock(t, r, 2*u, 0)
	b := mustBlock(t, r, 2*u, 2*u)
	cases := []struct {
		addr uint64
		n    int
		want *heapBlock
	}{
		{a.addr, 2 * u, a},       // start
		{a.addr + 8, 16, a},      // interior
		{b.addr - 1, 1, a},       // last byte of a
		{b.addr, 4, b},           // start of the newer block
		{b.addr + u, u, b},       // interior, up to the end
		{b.addr - 1, 2, nil},     // straddles a and b
		{b.addr + 1, 2 * u, nil}, // overruns b
		{b.addr + 2*u, 4, nil},   // free space in the segment
		{a.addr - u, 4, nil},     // before the segment
		{a.addr + 8*u, 4, nil},   // after the segment
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
	r := newRing(t, 4*u)
	mustBlock(t, r, 4*u, 0)
	mustFull(t, r, 1)
	for _, n := range []int{4*u + 1, 1 << 20} {
		b, err := r.alloc(n)
		if b != nil || KindOf(err) != ValueError {
			t.Fatalf("alloc(%d) beyond the ring: block %v, err %v; want a ValueError", n, b, err)
		}
	}
}

// A ring whose size is not a multiple of the alignment must refuse a
// request whose aligned size does not fit, not slice past the segment.
func TestHeapOversizeAfterAlignment(t *testing.T) {
	r := newRing(t, 1600)
	b, err := r.alloc(1500) // fits unaligned, 2048 aligned
	if b != nil || KindOf(err) != ValueError {
		t.Fatalf("alloc(1500) in a 1600-byte ring: block %v, err %v; want a ValueError", b, err)
	}
	mustBlock(t, r, u, 0)
}

func TestHeapCloseRemovesSegment(t *testing.T) {
	r := newHeapRing(4 * u)
	t.Cleanup(func() { r.close() })   // idempotent; for early failures
	if err := r.close(); err != nil { // nothing allocated: nothing to close
		t.Fatal(err)
	}
	b := mustBlock(t, r, u, 0)
	name := r.seg.Name
	if left, _ := shm.Leftovers(name); len(left) != 1 {
		t.Fatalf("segment %s not in /dev/shm: %v", name, left)
	}
	if _, err := hostmem.Resolve(b.addr, u); err != nil {
		t.Fatalf("heap memory does not resolve: %v", err)
	}
	if err := r.close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := shm.Leftovers(name); len(left) != 0 {
		t.Fatalf("segment still present after close: %v", left)
	}
	if _, err := hostmem.Resolve(b.addr, u); err == nil {
		t.Fatal("heap address still resolves after close")
	}
	if r.seg != nil || r.find(b.addr, 1) != nil {
		t.Fatal("closed ring still has a segment")
	}
}

// The run heap keeps one ring per scope depth: a block held at depth 0
// does not hold back depth 1, which cycles through more than a whole ring
// while it lives; depths past the last ring share it.
func TestRunHeapRingPerDepth(t *testing.T) {
	h := newRunHeap(4 * u)
	t.Cleanup(func() {
		if err := h.close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	outer, err := h.alloc(0, u)
	if err != nil || outer == nil || outer.ring != h.rings[0] {
		t.Fatalf("depth 0: block %+v, err %v", outer, err)
	}
	for i := range 10 { // 10 units through a 4-unit ring
		b, err := h.alloc(1, u)
		if err != nil || b == nil || b.ring != h.rings[1] {
			t.Fatalf("depth 1, round %d: block %+v, err %v", i, b, err)
		}
		if h.find(b.addr, u) != b || h.used() != 2*u {
			t.Fatalf("round %d: find %v, used %d", i, h.find(b.addr, u), h.used())
		}
		h.unref(b)
	}
	for depth, ring := range []int{0, 1, 2, 3, 3, 3} {
		if got := ringForDepth(depth); got != ring {
			t.Errorf("ringForDepth(%d) = %d, want %d", depth, got, ring)
		}
	}
	deep, _ := h.alloc(7, 3*u)
	if deep == nil || deep.ring != h.rings[3] {
		t.Fatalf("depth 7: block %+v, want one from the last ring", deep)
	}
	if b, err := h.alloc(3, 2*u); b != nil || err != nil { // shares the last ring's room
		t.Fatalf("depth 3 with the last ring holding 3 of 4 units: block %+v, err %v", b, err)
	}
	h.unref(deep)
	h.unref(outer)
	if h.used() != 0 {
		t.Fatalf("used %d after freeing all", h.used())
	}
}

// Every block of every ring starts on a 1024-byte boundary, as upstream's.
func TestRunHeapAlignment(t *testing.T) {
	h := newRunHeap(64 * u)
	t.Cleanup(func() { h.close() })
	for i, n := range []int{1, 3, 1000, 1025, 4000, 64, 0} {
		b, err := h.alloc(i%heapRings, n)
		if err != nil || b == nil {
			t.Fatalf("alloc(%d): %v", n, err)
		}
		if b.addr%1024 != 0 || b.size%1024 != 0 || b.size < n {
			t.Fatalf("alloc(%d) at %#x, %d bytes: not 1024-aligned", n, b.addr, b.size)
		}
	}
}

// An outer-scope intermediate held while an inner scope churns through
// several rings' worth: with one ring the churn stalled behind the held
// block ("heap ring exhausted"); with a ring per depth it runs.
func TestHeapOuterBlockDoesNotStallInnerScopes(t *testing.T) {
	w := newWorker(t, Config{HeapRingSize: 2 * heapAlign})
	var wrote atomic.Int64
	h := register(t, w, chipK("fill", func(c *ChipCtx, a *TaskArgs) error {
		put64(devBytes(c, a, 0), int64(a.Scalars[0]))
		wrote.Add(1)
		return nil
	}))
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		outer := must(o.Alloc([]int{heapAlign / 8}, dtype.Int64))
		must(o.SubmitNext(h, mkArgs(outer, Output, uint64(1)), nil, 0))
		for i := range 8 { // 8 units through a 2-unit ring
			must(0, o.ScopeBegin())
			tmp := must(o.Alloc([]int{heapAlign / 8}, dtype.Int64))
			if tmp.Addr%1024 != 0 {
				t.Errorf("inner alloc %d at %#x: not 1024-aligned", i, tmp.Addr)
			}
			must(o.SubmitNext(h, mkArgs(tmp, Output, uint64(i)), nil, i%2))
			must(0, o.ScopeEnd())
		}
		out := mkArgs(Tensor{Shape: []int{3}, DType: dtype.Float32}, Output, uint64(9))
		must(o.SubmitNext(h, out, nil, 0))
		if a := out.Tensors[0].Addr; a == 0 || a%1024 != 0 {
			t.Errorf("an auto-allocated OUTPUT at %#x: not 1024-aligned", a)
		}
	}))
	if wrote.Load() != 10 || heapUsed(w) != 0 {
		t.Fatalf("%d tasks wrote, heap used %d after the run", wrote.Load(), heapUsed(w))
	}
}

// A heap OUTPUT is zeroed before its task sees it, also when the block
// reuses memory an earlier run's task wrote (the zeroing is done outside
// w.mu, with the task held until it is).
func TestHeapOutputIsZeroedOnReuse(t *testing.T) {
	w := newWorker(t, Config{})
	var dirty atomic.Int64
	hW := register(t, w, chipK("scribble", func(c *ChipCtx, a *TaskArgs) error {
		b := devBytes(c, a, 0)
		for i := range b {
			b[i] = 0xff
		}
		return nil
	}))
	hR := register(t, w, chipK("look", func(c *ChipCtx, a *TaskArgs) error {
		for _, x := range devBytes(c, a, 0) {
			if x != 0 {
				dirty.Add(1)
			}
		}
		return nil
	}))
	var addrs [2]uint64
	for i, h := range []*Handle{hW, hR} {
		mustRun(t, w, buildErr(func(o *Orchestrator) {
			out := mkArgs(Tensor{Shape: []int{1024}, DType: dtype.Int64}, Output)
			must(o.SubmitNext(h, out, nil, 0))
			addrs[i] = out.Tensors[0].Addr
		}))
	}
	if addrs[0] != addrs[1] {
		t.Fatalf("the second run's OUTPUT is at %#x, not the first's %#x: nothing was reused", addrs[1], addrs[0])
	}
	if n := dirty.Load(); n != 0 {
		t.Fatalf("%d bytes of the reused OUTPUT were not zero", n)
	}
}
