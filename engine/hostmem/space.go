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

// Space allocates host memory in shared segments. Nothing is freed before
// Close: host tensors live as long as the run, and a segment per tensor
// would cost a file and a mapping each.
type Space struct {
	mu     sync.Mutex
	segs   []*shm.Segment
	chunk  *shm.Segment // current small-allocation chunk
	off    int          // bump offset into chunk
	closed bool
}

// NewSpace returns an empty Space.
func NewSpace() *Space { return &Space{} }

// Alloc returns size zeroed bytes, 64-byte aligned, at a registered address.
// Memory is never reused within a Space, so fresh shared memory (zero from
// the kernel) is all the zeroing needed. A size of 0 still gets a distinct
// address.
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
		return seg.Addr(), seg.Mem[:size:size], nil
	}
	need := (max(size, 1) + align - 1) &^ (align - 1)
	if s.chunk == nil || s.off+need > len(s.chunk.Mem) {
		seg, err := s.newSeg("hostchunk", chunkSize)
		if err != nil {
			return 0, nil, err
		}
		s.chunk, s.off = seg, 0
	}
	off := s.off
	s.off += need
	return s.chunk.Addr() + uint64(off), s.chunk.Mem[off : off+size : off+size], nil
}

func (s *Space) newSeg(tag string, size int) (*shm.Segment, error) {
	seg, err := shm.Create(tag, size)
	if err != nil {
		return nil, kind.Errorf(kind.RuntimeError, "host memory: %w", err)
	}
	Register(seg)
	s.segs = append(s.segs, seg)
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
	for _, seg := range s.segs {
		Unregister(seg)
		errs = append(errs, seg.Close())
	}
	s.segs, s.chunk = nil, nil
	return errors.Join(errs...)
}
