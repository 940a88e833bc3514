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

// Space allocates host memory in shared segments: small allocations share
// chunks (a segment per tensor would cost a file and a mapping each), a
// large one gets a segment of its own. Free gives an allocation back: a
// large one's segment goes at once, a chunk when every allocation in it
// has been freed and it is no longer the one being filled. Memory is
// never reused within a segment, so fresh shared memory (zero from the
// kernel) is all the zeroing needed.
type Space struct {
	mu     sync.Mutex
	segs   map[*shm.Segment]int // every segment, with its live allocations
	chunk  *shm.Segment         // current small-allocation chunk
	off    int                  // bump offset into chunk
	closed bool
}

// NewSpace returns an empty Space.
func NewSpace() *Space { return &Space{segs: map[*shm.Segment]int{}} }

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
		seg, err := s.newSeg("host", size)
		if err != nil {
			return 0, nil, err
		}
		s.segs[seg]++
		return seg.Addr(), seg.Mem[:size:size], nil
	}
	need := (max(size, 1) + align - 1) &^ (align - 1)
	if s.chunk == nil || s.off+need > len(s.chunk.Mem) {
		seg, err := s.newSeg("hostchunk", chunkSize)
		if err != nil {
			return 0, nil, err
		}
		s.retireChunk()
		s.chunk, s.off = seg, 0
	}
	off := s.off
	s.off += need
	s.segs[s.chunk]++
	return s.chunk.Addr() + uint64(off), s.chunk.Mem[off : off+size : off+size], nil
}

// retireChunk lets the chunk being filled go if nothing in it is live,
// since a new one replaces it. Caller holds s.mu.
func (s *Space) retireChunk() {
	if c := s.chunk; c != nil && s.segs[c] == 0 {
		s.drop(c)
	}
	s.chunk = nil
}

// Free gives back the allocation at addr, which Alloc returned and which
// must not be used afterwards. Freeing an address of no live allocation
// is an error.
func (s *Space) Free(addr uint64) error {
	seg, _, ok := Locate(addr)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok || s.segs[seg] == 0 {
		return kind.Errorf(kind.ValueError, "host address %#x is not a live allocation of this space", addr)
	}
	s.segs[seg]--
	if s.segs[seg] == 0 && seg != s.chunk {
		return s.drop(seg)
	}
	return nil
}

// drop unregisters and closes a segment. Caller holds s.mu.
func (s *Space) drop(seg *shm.Segment) error {
	delete(s.segs, seg)
	Unregister(seg)
	return seg.Close()
}

// Bytes is the shared memory the space holds now, for tests and reports.
func (s *Space) Bytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for seg := range s.segs {
		n += len(seg.Mem)
	}
	return n
}

func (s *Space) newSeg(tag string, size int) (*shm.Segment, error) {
	seg, err := shm.Create(tag, size)
	if err != nil {
		return nil, kind.Errorf(kind.RuntimeError, "host memory: %w", err)
	}
	Register(seg)
	s.segs[seg] = 0
	return seg, nil
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
	for seg := range s.segs {
		Unregister(seg)
		errs = append(errs, seg.Close())
	}
	s.segs, s.chunk = nil, nil
	return errors.Join(errs...)
}
