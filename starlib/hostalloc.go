package starlib

import (
	"runtime"
	"sync"

	"simpler/engine"
	"simpler/engine/hostmem"
)

// hostAlloc is the memory of a host_tensor, shared by the tensor and every
// view of it. It is given back to the session's space when nothing can use
// it any more: every Tensor value holding it is unreachable (a cleanup
// attached to each, runtime.AddCleanup) and no run in flight uses it (a
// pin, taken at submit and dropped at the run's fence); or at once by
// t.free(), which a run in flight refuses.
type hostAlloc struct {
	space *hostmem.Space
	addr  uint64

	mu      sync.Mutex
	holders int  // Tensor values that can reach it
	pins    int  // runs in flight that use it
	freed   bool // given back: using it is an error
}

// hold ties the allocation to a Tensor value: when t is unreachable, its
// hold goes.
func (a *hostAlloc) hold(t *Tensor) {
	a.mu.Lock()
	a.holders++
	a.mu.Unlock()
	runtime.AddCleanup(t, func(a *hostAlloc) { a.letGo() }, a)
}

func (a *hostAlloc) letGo() { a.drop(&a.holders) }

// pin keeps the allocation for a run in flight; unpin lets it go again.
func (a *hostAlloc) pin() {
	a.mu.Lock()
	a.pins++
	a.mu.Unlock()
}

func (a *hostAlloc) unpin() { a.drop(&a.pins) }

// drop takes one from count (holders or pins, under a.mu) and frees the
// memory once neither holds it.
func (a *hostAlloc) drop(count *int) {
	a.mu.Lock()
	*count--
	free := a.holders == 0 && a.pins == 0 && !a.freed
	if free {
		a.freed = true
	}
	a.mu.Unlock()
	if free {
		a.space.Free(a.addr)
	}
}

// free gives the memory back now, unless a run in flight uses it.
func (a *hostAlloc) free(op string) error {
	a.mu.Lock()
	if a.freed {
		a.mu.Unlock()
		return nil
	}
	if a.pins > 0 {
		a.mu.Unlock()
		return errorf(engine.RuntimeError, "%s: the tensor is used by a run still in flight; wait for it first", op)
	}
	a.freed = true
	a.mu.Unlock()
	return a.space.Free(a.addr)
}

// live refuses an allocation that was freed.
func (a *hostAlloc) live(op string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.freed {
		return errorf(engine.RuntimeError, "%s: the tensor was freed", op)
	}
	return nil
}

// gcEvery is how many bytes of host tensors may be allocated between
// garbage collections: the memory is shared memory, not Go heap, so the
// collector would not run for it by itself, and unreachable tensors
// would hold it until it did.
const gcEvery = 64 << 20

// allocated counts n more bytes of host tensors, collecting garbage now
// and then so that dropped tensors give their memory back.
func (s *Session) allocated(n int) {
	s.mu.Lock()
	s.sinceGC += n
	collect := s.sinceGC >= gcEvery
	if collect {
		s.sinceGC = 0
	}
	s.mu.Unlock()
	if collect {
		runtime.GC()
	}
}
