package engine

import (
	"fmt"

	"simpler/engine/hostmem"
	"simpler/hal/shm"
)

// The run heap is host shared memory from which OUTPUT tensors with no
// address and orch.alloc intermediates are carved. As upstream, it is
// heapRings independent rings of heap_ring_size bytes each, and the scope
// depth of an allocation picks its ring (ringForDepth): the run's own
// scope allocates from ring 0, the first scope_begin() inside it from
// ring 1, and so on, every depth from heapRings-1 down sharing the last
// ring. Each ring reclaims from its own oldest end, so a long-lived block
// of an outer scope never holds back the churn of the scopes inside it.
//
// Every block is heapAlign-aligned and a multiple of heapAlign long, as
// upstream's output packing is. A ring's segment is created at its first
// allocation, so a script that never nests pays for one ring only.
//
// All fields are guarded by the Worker's mutex.
type runHeap struct {
	rings [heapRings]*heapRing
}

const (
	heapRings = 4
	heapAlign = 1024
)

// ringForDepth maps a scope depth (0 is the run's own scope) to its ring.
func ringForDepth(depth int) int { return min(max(depth, 0), heapRings-1) }

func newRunHeap(size int) *runHeap {
	h := &runHeap{}
	for i := range h.rings {
		h.rings[i] = newHeapRing(size)
		h.rings[i].index = i
	}
	return h
}

// depth is the depth of o's current scope (0: the run's own), which
// picks the heap ring its blocks come from.
func (o *Orchestrator) depth() int {
	n := 0
	for s := o.scope; s != o.run.root; s = s.parent {
		n++
	}
	return n
}

// ensureRing makes the segment of the ring of o's scope depth, if it has
// none yet, outside w.mu: creating and mapping a ring of heap_ring_size
// bytes is I/O, which no completion should wait behind. Another submit
// may make it meanwhile; then this one's is closed.
func (o *Orchestrator) ensureRing() error {
	w, depth := o.w, o.depth()
	w.mu.Lock()
	if w.heap == nil { // not initialised: the submit is refused under w.mu
		w.mu.Unlock()
		return nil
	}
	r := w.heap.rings[ringForDepth(depth)]
	have := r.seg != nil
	w.mu.Unlock()
	if have {
		return nil
	}
	seg, err := shm.Create(fmt.Sprintf("heap%d", r.index), r.size)
	if err != nil {
		return Wrap(err, "heap ring")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.seg != nil {
		return seg.Close()
	}
	hostmem.Register(seg)
	r.seg = seg
	return nil
}

// holdHeap holds every heap block t touches until t retires, after
// giving its host OUTPUTs with no address blocks of their own when fresh
// says it has some (allocOutputs). Caller holds w.mu.
func (o *Orchestrator) holdHeap(op string, t *Task, argsList []*TaskArgs, fresh bool) error {
	if fresh {
		if err := o.allocOutputs(op, t, argsList); err != nil {
			return err
		}
	}
	for m := range t.args {
		for _, ten := range t.args[m].Tensors {
			if ten.ChildMemory {
				continue
			}
			if b := o.w.heap.find(ten.Addr, ten.spanBytes()); b != nil {
				b.refs++
				t.heap = append(t.heap, b)
			}
		}
	}
	return nil
}

// allocOutputs gives every host OUTPUT of a submit with no address a
// block of the run heap, and writes its address into the caller's
// TaskArgs (so a later submit can consume it) and into t's copy of them.
// The blocks it took are in o.zeroing, for the submit to zero outside
// w.mu. Caller holds w.mu.
func (o *Orchestrator) allocOutputs(op string, t *Task, argsList []*TaskArgs) error {
	for m, a := range argsList {
		if a == nil {
			continue
		}
		for i := range a.Tensors {
			ten := &a.Tensors[i]
			if ten.Addr != 0 || ten.ChildMemory || a.Remote != nil && !a.Remote[i].here() {
				continue
			}
			b, err := o.heapAlloc(op, ten.spanBytes())
			if err != nil {
				return err
			}
			o.zeroing = append(o.zeroing, b)
			ten.Addr = b.addr
			t.args[m].Tensors[i].Addr = b.addr
		}
	}
	return nil
}

// heapAlloc takes a block for the current scope from the ring of its
// depth, waiting for running tasks to free space when that ring is full.
// Caller holds w.mu.
func (o *Orchestrator) heapAlloc(op string, n int) (*heapBlock, error) {
	w := o.w
	depth := o.depth()
	for {
		b, err := w.heap.alloc(depth, n)
		if err != nil {
			return nil, Wrap(err, op)
		}
		if b != nil {
			w.race.nameHeap(b, op)
			o.scope.blocks = append(o.scope.blocks, b)
			return b, nil
		}
		if w.core.HeapStuck(&o.run.core) {
			r := w.heap.rings[ringForDepth(depth)]
			return nil, Errorf(RuntimeError, "%s: heap ring exhausted: %d bytes wanted at scope depth %d, %d of ring %d's heap_ring_size=%d held by live scopes", op, n, depth, r.used, r.index, r.size)
		}
		driver{w}.wait()
	}
}

// alloc takes a block of n bytes from the ring of scope depth
// depth; nil, nil when that ring has no room now.
func (h *runHeap) alloc(depth, n int) (*heapBlock, error) {
	return h.rings[ringForDepth(depth)].alloc(n)
}

// find returns the live block, in any ring, containing [addr, addr+n).
func (h *runHeap) find(addr uint64, n int) *heapBlock {
	for _, r := range h.rings {
		if b := r.find(addr, n); b != nil {
			return b
		}
	}
	return nil
}

// unref drops one reference to b, in the ring it came from.
func (h *runHeap) unref(b *heapBlock) { b.ring.unref(b) }

// used is the bytes held by live blocks over all rings.
func (h *runHeap) used() int {
	n := 0
	for _, r := range h.rings {
		n += r.used
	}
	return n
}

// close removes every ring's segment; it reports the first failure but
// tries them all.
func (h *runHeap) close() error {
	var first error
	for _, r := range h.rings {
		if err := r.close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// heapRing is one ring of the run heap. Blocks are handed out in ring
// order and reclaimed from the oldest end once freed, so a block freed
// early is reused only when everything older in the same ring is free
// too. A block is freed when its scope has ended and no unfinished task
// refers to it.
type heapRing struct {
	index  int // in the run heap: the scope depth it serves
	size   int
	seg    *shm.Segment
	head   int          // next offset to hand out
	blocks []*heapBlock // live blocks in allocation order
	byAddr map[uint64]*heapBlock
	used   int
}

type heapBlock struct {
	ring  *heapRing
	addr  uint64
	off   int
	size  int
	refs  int // the scope's hold plus one per unfinished task
	freed bool
}

func newHeapRing(size int) *heapRing {
	return &heapRing{size: size, byAddr: map[uint64]*heapBlock{}}
}

// alloc returns a block of n bytes, or nil when the ring has no room now
// (a caller may wait for tasks to free some). Its bytes are whatever the
// block before it left: the caller zeroes them (zero) outside w.mu,
// before anything can read them.
func (r *heapRing) alloc(n int) (*heapBlock, error) {
	need := max(heapAlign, (n+heapAlign-1)&^(heapAlign-1))
	if need > r.size { // compare the aligned size: it is what place must fit
		return nil, Errorf(ValueError, "heap allocation of %d bytes (%d aligned to %d) exceeds heap_ring_size=%d", n, need, heapAlign, r.size)
	}
	if r.seg == nil {
		seg, err := shm.Create(fmt.Sprintf("heap%d", r.index), r.size)
		if err != nil {
			return nil, Wrap(err, "heap ring")
		}
		hostmem.Register(seg)
		r.seg = seg
	}
	n = need
	off, ok := r.place(n)
	if !ok {
		return nil, nil
	}
	b := &heapBlock{ring: r, addr: r.seg.Addr() + uint64(off), off: off, size: n, refs: 1}
	r.head = off + n
	r.blocks = append(r.blocks, b)
	r.byAddr[b.addr] = b
	r.used += n
	return b, nil
}

// zero clears the block. It needs no lock: the block is reserved, and
// nothing reads it before its submit or alloc has returned.
func (b *heapBlock) zero() { clear(b.ring.seg.Mem[b.off : b.off+b.size]) }

// place finds room for n bytes after head, wrapping to the start when the
// oldest live block leaves room there.
func (r *heapRing) place(n int) (int, bool) {
	if len(r.blocks) == 0 {
		return 0, true
	}
	tail := r.blocks[0].off
	if r.head > tail { // not wrapped: live blocks are [tail, head)
		if r.head+n <= r.size {
			return r.head, true
		}
		if n <= tail {
			return 0, true
		}
		return 0, false
	}
	if r.head+n <= tail { // wrapped: the free gap is [head, tail)
		return r.head, true
	}
	return 0, false
}

// find returns the live block containing [addr, addr+n).
func (r *heapRing) find(addr uint64, n int) *heapBlock {
	if r.seg == nil {
		return nil
	}
	base := r.seg.Addr()
	if addr < base || addr >= base+uint64(r.size) {
		return nil
	}
	if b, ok := r.byAddr[addr]; ok {
		return b
	}
	for i := len(r.blocks) - 1; i >= 0; i-- {
		b := r.blocks[i]
		if !b.freed && addr >= b.addr && addr+uint64(n) <= b.addr+uint64(b.size) {
			return b
		}
	}
	return nil
}

// unref drops one reference and reclaims space once the oldest blocks are
// free.
func (r *heapRing) unref(b *heapBlock) {
	b.refs--
	if b.refs > 0 {
		return
	}
	b.freed = true
	r.used -= b.size
	delete(r.byAddr, b.addr)
	for len(r.blocks) > 0 && r.blocks[0].freed {
		r.blocks[0] = nil
		r.blocks = r.blocks[1:]
	}
	if len(r.blocks) == 0 {
		r.blocks = nil
		r.head = 0
	}
}

func (r *heapRing) close() error {
	if r.seg == nil {
		return nil
	}
	hostmem.Unregister(r.seg)
	err := r.seg.Close()
	r.seg = nil
	return err
}
