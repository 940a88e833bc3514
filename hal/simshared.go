package hal

// Shared windows: one simulated address per window per process.
//
// A communication window is host memory every rank of a domain maps into
// its chip. Giving each (chip, window) pair its own region made a
// 1024-rank domain cost a million region inserts and removals in the
// chips' tables. Instead a platform keeps one range of simulated
// addresses, above every chip's own range, where each window of this
// process (a distinct host slice) has one slot; every chip that maps the
// window gets that slot in its device id's view of the range, and counts
// the mapping in its own small table. The isolation rule is kept where
// addresses resolve: a chip reaches a window in the shared range only
// while it maps that window itself (it is a member of the window's
// domain), so a kernel on any other chip is refused exactly as for an
// address outside any live allocation.
//
// A window's slot is reserved while any chip maps it; once the last one
// unmaps it, the slot is remembered as freed (bounded, as a chip's freed
// starts are) and handed out again only once its size class has no fresh
// slot left.

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"simpler/internal/bounds"
	"simpler/kind"
)

// The shared range is cut by size class: a window of span bytes gets a
// slot of 2^k bytes (the least k >= minClass with 2^k >= span) in class
// k's 128 GiB, aligned to 2^k. So the window's start is ptr's address with
// the low k bits cleared, k being in ptr itself: a chip resolves an
// address with one lookup in its own table, without a platform-wide lock
// or a sorted search.
//
// Each device id sees the range at its own offset (id<<aliasShift), so a
// window's address on device 0 is not its address on device 1, exactly as
// when every chip had its own regions: a pointer handed to the wrong chip
// still fails (and the error says whose it is), also between two members
// of one domain. Chips of one id (on different nodes) share the offset;
// what keeps them apart is membership.
const (
	sharedBase  = simBase + 16<<simShift // above 16 chips of 1 TiB from simBase
	aliasShift  = 42                     // 4 TiB per device id
	sharedViews = 16
	classShift  = 37 // each class spans 128 GiB
	minClass    = 9  // 512 bytes, the allocation granularity
	maxClass    = classShift
	sharedLimit = sharedBase + sharedViews<<aliasShift
	shards      = 64
)

// sharedWin is one window in the shared range.
type sharedWin struct {
	region
	refs int // mappings by all chips; guarded by its shard's mu
}

// A window of at most lingerSpan bytes that its last chip unmaps lingers:
// it stays placed and known by its memory, up to lingerPerShard of them
// per shard, so that mapping the same memory again finds it. A task maps
// its host tensors into its chip and unmaps them when it ends, so a loop
// of small collectives over the same tensors placed and freed every
// window on every call: a fifth of a 4 KiB allreduce. To the chips and to
// every check a lingering window is unmapped: it is out of the live
// table, its start counts as freed, and no other memory gets its slot.
const (
	lingerSpan     = 64 << 10
	lingerPerShard = 4
)

type memKey struct {
	p *byte
	n int
}

// sharedSpace is a platform's shared range. A window is found by its
// host memory in one of the shards (the reference counts, touched by
// every mapping), and placed and freed under mu (once per window).
type sharedSpace struct {
	shards [shards]struct {
		mu    sync.Mutex
		byMem map[memKey]*sharedWin
		// linger holds small windows no chip maps any more, oldest first,
		// still placed and still found by their memory (release).
		linger []*sharedWin
	}
	mu    sync.Mutex
	live  map[uint64]*sharedWin // by start
	next  [maxClass + 1]uint64  // class k's next fresh slot
	reuse [maxClass + 1][]uint64
	freed map[uint64]bool // starts freed and not reused since
	order []uint64        // freed, oldest first
}

func inShared(ptr uint64) bool { return ptr >= sharedBase && ptr < sharedLimit }

// alias splits a device address in the shared range into the device id
// whose view it is in and the canonical address (device 0's view).
func alias(ptr uint64) (id int, canon uint64) {
	id = int((ptr - sharedBase) >> aliasShift)
	return id, ptr - uint64(id)<<aliasShift
}

// sharedStart is the start of the slot holding canon, a canonical
// address, or 0 past the last class.
func sharedStart(canon uint64) uint64 {
	k := (canon-sharedBase)>>classShift + minClass
	if k > maxClass {
		return 0
	}
	return canon &^ (1<<k - 1)
}

func classOf(span uint64) (int, bool) {
	for k := minClass; k <= maxClass; k++ {
		if span <= 1<<k {
			return k, true
		}
	}
	return 0, false
}

// acquire returns mem's window, placing it if no chip maps it yet, and
// counts one more mapping of it.
func (s *sharedSpace) acquire(mem []byte, label string) (*sharedWin, error) {
	k := memKey{&mem[0], len(mem)}
	sh := &s.shards[(uintptr(unsafe.Pointer(k.p))>>12)%shards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if w := sh.byMem[k]; w != nil {
		if w.refs == 0 { // lingering: mapped again, maybe for another use
			sh.linger = slices.DeleteFunc(sh.linger, func(x *sharedWin) bool { return x == w })
			w.label = label // no chip maps it, so none reads it meanwhile
			s.mu.Lock()
			s.live[w.start] = w
			delete(s.freed, w.start)
			s.mu.Unlock()
		}
		w.refs++
		return w, nil
	}
	span := roundUp(uint64(len(mem)))
	start, ok := s.place(span)
	if !ok {
		return nil, kind.Errorf(kind.RuntimeError, "out of shared window address space: no free range of %d bytes for window %q", span, label)
	}
	n := len(mem)
	w := &sharedWin{region: region{start: start, span: span, size: uint64(n), mem: mem[:n:n], window: true, label: label}, refs: 1}
	if sh.byMem == nil {
		sh.byMem = map[memKey]*sharedWin{}
	}
	sh.byMem[k] = w
	s.mu.Lock()
	s.live[start] = w
	s.mu.Unlock()
	return w, nil
}

// place reserves a slot for span bytes: a fresh one while its class
// lasts (so an address is not handed out again early, which keeps a use
// after unmapping visible), then one freed before.
func (s *sharedSpace) place(span uint64) (uint64, bool) {
	k, ok := classOf(span)
	if !ok {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == nil {
		s.live, s.freed = map[uint64]*sharedWin{}, map[uint64]bool{}
	}
	base := uint64(sharedBase) + uint64(k-minClass)<<classShift
	if s.next[k] < 1<<(classShift-k) {
		a := base + s.next[k]<<k
		s.next[k]++
		return a, true
	}
	if n := len(s.reuse[k]); n > 0 {
		a := s.reuse[k][n-1]
		s.reuse[k] = s.reuse[k][:n-1]
		delete(s.freed, a)
		return a, true
	}
	return 0, false
}

// release drops one mapping of w; the last frees its address.
func (s *sharedSpace) release(w *sharedWin) {
	k := memKey{&w.mem[0], len(w.mem)}
	sh := &s.shards[(uintptr(unsafe.Pointer(k.p))>>12)%shards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if w.refs--; w.refs > 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.live, w.start)
	if w.span <= lingerSpan {
		s.freed[w.start] = true // for the checks' messages, as below
		if sh.linger = append(sh.linger, w); len(sh.linger) <= lingerPerShard {
			return
		}
		w = sh.linger[0]
		sh.linger = slices.Delete(sh.linger, 0, 1)
		k = memKey{&w.mem[0], len(w.mem)}
	}
	delete(sh.byMem, k)
	c, _ := classOf(w.span)
	s.reuse[c] = append(s.reuse[c], w.start)
	s.freed[w.start] = true
	s.order = append(s.order, w.start)
	if len(s.order) > freedKeep {
		// A start in order may have been reused and freed again; only
		// the oldest record of it is dropped early, which degrades a
		// message, never a check.
		delete(s.freed, s.order[0])
		s.order = s.order[1:]
	}
}

// find is the live window whose span holds ptr, or nil.
func (s *sharedSpace) find(ptr uint64) *sharedWin {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.live[sharedStart(ptr)]; w != nil && ptr-w.start < w.span {
		return w
	}
	return nil
}

// wasFreed reports whether start was a window's, unmapped everywhere.
func (s *sharedSpace) wasFreed(start uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.freed[start]
}

// mapping is one shared window as a chip maps it.
type mapping struct {
	w *sharedWin
	n int // how many times this chip mapped it
}

// view is w's region as device id sees it.
func (w *sharedWin) view(id int) *region {
	r := w.region
	r.start += uint64(id) << aliasShift
	return &r
}

// mapShared maps mem into c at its shared address. c.mu is held.
func (c *simChip) mapShared(mem []byte, label string) (uint64, error) {
	if c.id < 0 || c.id >= sharedViews {
		return 0, kind.Errorf(kind.RuntimeError, "device %d has no view of the shared window range (devices 0..%d)", c.id, sharedViews-1)
	}
	w, err := c.plat.shared.acquire(mem, label)
	if err != nil {
		return 0, kind.Errorf(kind.RuntimeError, "device %d %s", c.id, kind.Message(err))
	}
	if c.mapped == nil {
		c.mapped = map[uint64]mapping{}
	}
	m := c.mapped[w.start]
	c.mapped[w.start] = mapping{w, m.n + 1}
	c.windows++
	return w.start + uint64(c.id)<<aliasShift, nil
}

// member is the shared window holding ptr, a device address in the
// shared range, and ptr's canonical address, if c maps that window:
// c's own view of a window it maps, nothing else. c.mu is held.
func (c *simChip) member(ptr uint64) (*sharedWin, uint64) {
	id, canon := alias(ptr)
	if id != c.id {
		return nil, canon
	}
	if m, ok := c.mapped[sharedStart(canon)]; ok && canon-m.w.start < m.w.span {
		return m.w, canon
	}
	return nil, canon
}

// unmapShared undoes one mapShared of the window starting at ptr. c.mu
// is held.
func (c *simChip) unmapShared(ptr uint64) error {
	w, canon := c.member(ptr)
	switch {
	case w != nil && w.start != canon:
		return kind.Errorf(kind.ValueError, "unmap: %#x on device %d is inside %s; unmap takes the start address", ptr, c.id, w.view(c.id))
	case w != nil:
		if m := c.mapped[canon]; m.n > 1 {
			c.mapped[canon] = mapping{w, m.n - 1}
		} else {
			delete(c.mapped, canon) // the map keeps its room for the next domain
		}
		c.windows--
		c.plat.shared.release(w)
		return nil
	case c.ownView(ptr) && (c.plat.shared.wasFreed(canon) || c.plat.shared.find(canon) != nil):
		return kind.Errorf(kind.ValueError, "unmap: window %#x on device %d was already unmapped", ptr, c.id)
	}
	return kind.Errorf(kind.ValueError, "unmap: %#x is not a mapped window on device %d%s", ptr, c.id, c.whose(ptr))
}

// ownView reports whether ptr, in the shared range, is in c's view of it.
func (c *simChip) ownView(ptr uint64) bool {
	id, _ := alias(ptr)
	return id == c.id
}

// freeShared is Free's answer for an address in the shared range: a
// window is never freed. c.mu is held.
func (c *simChip) freeShared(ptr uint64) error {
	w, canon := c.member(ptr)
	switch {
	case w != nil && w.start != canon:
		return kind.Errorf(kind.ValueError, "free: %#x on device %d is inside %s; free takes the start address", ptr, c.id, w.view(c.id))
	case w != nil:
		return kind.Errorf(kind.ValueError, "free: %#x on device %d is a communication window; it is released with its domain, not freed", ptr, c.id)
	case c.ownView(ptr) && c.plat.shared.wasFreed(canon):
		return kind.Errorf(kind.ValueError, "free: %#x on device %d was a communication window, already unmapped", ptr, c.id)
	}
	return kind.Errorf(kind.ValueError, "free: %#x is not a live allocation on device %d%s", ptr, c.id, c.whose(ptr))
}

// accessShared is access for an address in the shared range: only a
// window c maps resolves, in c's view. c.mu is held.
func (c *simChip) accessShared(op string, ptr uint64, n int) ([]byte, error) {
	w, canon := c.member(ptr)
	if w == nil {
		return nil, kind.Errorf(kind.ValueError, "%s of %d bytes at %#x on device %d is outside any live allocation%s",
			op, n, ptr, c.id, c.whose(ptr))
	}
	off := canon - w.start
	if !bounds.Fits(off, uint64(n), w.size) {
		return nil, kind.Errorf(kind.ValueError, "%s of %d bytes at %#x on device %d overruns %s", op, n, ptr, c.id, w.view(c.id))
	}
	return w.mem[off : off+uint64(n) : off+uint64(n)], nil
}

// dropShared releases every mapping c holds (Close). c.mu is held.
func (c *simChip) dropShared() {
	for _, m := range c.mapped {
		for range m.n {
			c.plat.shared.release(m.w)
		}
	}
	c.mapped = nil
}

// sharedHint is whose's hint for an address in the shared range: whose
// view it is in, if another device's.
func (c *simChip) sharedHint(ptr uint64) string {
	if !inShared(ptr) {
		return ""
	}
	if id, _ := alias(ptr); id != c.id {
		return fmt.Sprintf(" (it is an address on device %d)", id)
	}
	return ""
}
