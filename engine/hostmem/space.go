package hostmem

import (
	"errors"
	"sync"

	"simpler/hal/shm"
	"simpler/kind"
)

const (
	align     = 64      // cache line; also enough for every element type
	chunkSize = 4 << 20 // small allocations share segments of this size
	bigSize   = 1 << 20 // from here on an allocation gets its own segment
)

// Space allocates host memory in shared segments. Small allocations share
// chunks (a segment per tensor would cost a file and a mapping each); a
// large one gets a segment of its own, which goes as soon as it is freed.
//
// Space within a chunk is reused: each chunk keeps a free list (freeList,
// first fit with coalescing), and an allocation goes to the first chunk,
// oldest first, with room for it. So a loop that keeps a small result and
// drops a large temporary each iteration fills the holes the temporaries
// leave instead of pinning a new chunk per few iterations. A chunk whose
// allocations are all freed is unmapped and unlinked, unless it is the
// only chunk left: that one is kept for the next allocation, so a loop
// that allocates and frees one tensor does not make and remove a segment
// each time. Reused bytes are zeroed by Alloc; bytes never handed out are
// the kernel's zeroes, left untouched (no memset). A chunk's pages are
// all reserved when it is made (hal/shm), so a full /dev/shm is an error
// at the Alloc that needs a new chunk, never a fault at a later write.
type Space struct {
	mu     sync.Mutex
	chunks []*chunk              // oldest first: the order first fit tries them in
	live   map[uint64]allocation // by address
	big    int                   // live large segments
	bytes  int                   // shared memory mapped, chunks and large segments
	closed bool
}

// chunk is a segment small allocations share, with its free space.
// Bytes from fresh on have never been handed out: they are still the
// kernel's zeroes, and need no memset to zero them.
type chunk struct {
	seg   *shm.Segment
	free  freeList
	fresh int
}

// allocation is one live allocation: n bytes at off in chunk c, or, when c
// is nil, the whole of its own segment seg.
type allocation struct {
	c   *chunk
	seg *shm.Segment
	off int
	n   int
}

// NewSpace returns an empty Space.
func NewSpace() *Space { return &Space{live: map[uint64]allocation{}} }

// Alloc returns size zeroed bytes, 64-byte aligned, at a registered
// address. A size of 0 still gets a distinct address.
func (s *Space) Alloc(size int) (addr uint64, mem []byte, err error) {
	if size < 0 {
		return 0, nil, kind.Errorf(kind.ValueError, "host allocation size must be >= 0, got %d", size)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, nil, kind.New(kind.RuntimeError, "host memory space is closed")
	}
	if size >= bigSize {
		seg, err := newSeg("host", size)
		if err != nil {
			return 0, nil, err
		}
		s.big++
		s.bytes += len(seg.Mem)
		s.live[seg.Addr()] = allocation{seg: seg, n: size}
		return seg.Addr(), seg.Mem[:size:size], nil
	}
	need := (max(size, 1) + align - 1) &^ (align - 1)
	c, off, err := s.place(need)
	if err != nil {
		return 0, nil, err
	}
	addr = c.seg.Addr() + uint64(off)
	s.live[addr] = allocation{c: c, off: off, n: need}
	mem = c.seg.Mem[off : off+size : off+size]
	if off < c.fresh { // bytes an earlier allocation had
		clear(mem[:min(size, c.fresh-off)])
	}
	c.fresh = max(c.fresh, off+need)
	return addr, mem, nil
}

// place takes need bytes from the first chunk with room, or from a new
// chunk. Caller holds s.mu.
func (s *Space) place(need int) (*chunk, int, error) {
	for _, c := range s.chunks {
		if off, ok := c.free.take(need); ok {
			return c, off, nil
		}
	}
	seg, err := newSeg("hostchunk", chunkSize)
	if err != nil {
		return nil, 0, err
	}
	c := &chunk{seg: seg, free: newFreeList(chunkSize)}
	s.chunks = append(s.chunks, c)
	s.bytes += chunkSize
	off, _ := c.free.take(need) // need < bigSize < chunkSize: it fits
	return c, off, nil
}

// Free gives back the allocation at addr, which Alloc returned and which
// must not be used afterwards. Freeing an address of no live allocation
// is an error.
func (s *Space) Free(addr uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.live[addr]
	if !ok {
		return kind.Errorf(kind.ValueError, "host address %#x is not a live allocation of this space", addr)
	}
	delete(s.live, addr)
	if a.c == nil {
		s.big--
		s.bytes -= len(a.seg.Mem)
		return closeSeg(a.seg)
	}
	a.c.free.give(a.off, a.n)
	if a.c.free.empty() && len(s.chunks) > 1 {
		return s.dropChunk(a.c)
	}
	return nil
}

// dropChunk unmaps and unlinks an empty chunk. Caller holds s.mu.
func (s *Space) dropChunk(c *chunk) error {
	for i, x := range s.chunks {
		if x == c {
			s.chunks = append(s.chunks[:i], s.chunks[i+1:]...)
			break
		}
	}
	s.bytes -= len(c.seg.Mem)
	return closeSeg(c.seg)
}

// Bytes is the shared memory the space holds now, for tests and reports.
func (s *Space) Bytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// Segments is the number of shared-memory objects the space holds now:
// its chunks and large allocations.
func (s *Space) Segments() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.chunks) + s.big
}

func newSeg(tag string, size int) (*shm.Segment, error) {
	seg, err := shm.Create(tag, size)
	if err != nil {
		// A RuntimeError either way (an error of shm without a kind is
		// one); Wrap keeps a full device's message whole.
		return nil, kind.Wrap(err, "host memory")
	}
	Register(seg)
	return seg, nil
}

// closeSeg unregisters a segment before unmapping it: its address range
// may be the next mapping's.
func closeSeg(seg *shm.Segment) error {
	Unregister(seg)
	return seg.Close()
}

// Close unregisters, unmaps and unlinks every segment. Slices returned by
// Alloc must not be touched afterwards. A second Close does nothing.
func (s *Space) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for _, c := range s.chunks {
		errs = append(errs, closeSeg(c.seg))
	}
	for _, a := range s.live {
		if a.c == nil {
			errs = append(errs, closeSeg(a.seg))
		}
	}
	s.chunks, s.live, s.big, s.bytes = nil, nil, 0, 0
	return errors.Join(errs...)
}
