package engine

import (
	"simpler/engine/hostmem"
	"simpler/hal/shm"
)

// HostBuffer is host memory born shared: a shared-memory object mapped
// into every local child, reused across runs without copies.
type HostBuffer struct {
	Token  uint64
	NBytes int
	seg    *shm.Segment
	refs   int  // tasks in flight that use it (w.mu)
	freed  bool // (w.mu)
}

// Addr is the buffer's host address.
func (b *HostBuffer) Addr() uint64 { return b.seg.Addr() }

// CreateHostBuffer makes a zeroed host buffer of nbytes owned by w; close
// frees what is left.
func (w *Worker) CreateHostBuffer(nbytes int) (*HostBuffer, error) {
	if nbytes <= 0 {
		return nil, Errorf(ValueError, "create_host_buffer: nbytes must be > 0, got %d", nbytes)
	}
	if err := w.usableNow("create_host_buffer"); err != nil {
		return nil, err
	}
	// The object is made and mapped outside w.mu, which every completion
	// takes; a close that came meanwhile is checked again under it.
	seg, err := shm.Create("hostbuf", nbytes)
	if err != nil {
		return nil, Wrap(err, "create_host_buffer")
	}
	w.mu.Lock()
	if err := w.usable("create_host_buffer"); err != nil {
		w.mu.Unlock()
		seg.Close()
		return nil, err
	}
	hostmem.Register(seg)
	w.bufSeq++
	b := &HostBuffer{Token: w.bufSeq, NBytes: nbytes, seg: seg}
	w.hostBufs[b.Token] = b
	w.hostBufSegs[seg] = b
	w.mu.Unlock()
	return b, nil
}

// usableNow is usable, taking w.mu for it.
func (w *Worker) usableNow(op string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.usable(op)
}

// FreeHostBuffer frees a host buffer; freeing it again is a no-op. A
// buffer that tasks in flight use is not freed: the free is refused.
func (w *Worker) FreeHostBuffer(b *HostBuffer) error {
	return w.ReleaseHostBuffer("free_host_buffer", b)
}

// ReleaseHostBuffer is FreeHostBuffer with the name of the operation that
// asks (release_buffer frees the same kind of buffer), for its errors.
func (w *Worker) ReleaseHostBuffer(op string, b *HostBuffer) error {
	w.mu.Lock()
	if w.hostBufs[b.Token] != b {
		w.mu.Unlock()
		return nil
	}
	if refs := b.refs; refs > 0 {
		w.mu.Unlock()
		return Errorf(RuntimeError, "%s: host buffer %d is used by %d task(s) still in flight; wait for their run first", op, b.Token, refs)
	}
	delete(w.hostBufs, b.Token)
	delete(w.hostBufSegs, b.seg)
	b.freed = true
	w.mu.Unlock()
	return b.close() // no task holds it and no submit can take it now: unmapped outside w.mu
}

// Freed reports whether the buffer was freed: a view of it must not be
// used any more (its memory may be another buffer's by now).
func (b *HostBuffer) Freed(w *Worker) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return b.freed
}

// refHostBufs counts t against every host buffer its tensors lie in, so
// that the buffer is not freed under it. Caller holds w.mu.
func (w *Worker) refHostBufs(t *Task) {
	if len(w.hostBufSegs) == 0 {
		return
	}
	for m := range t.args {
		for _, ten := range t.args[m].Tensors {
			if ten.ChildMemory || ten.Remote != nil || ten.Inline != nil {
				continue
			}
			if seg, _, ok := hostmem.Locate(ten.Addr); ok {
				if b := w.hostBufSegs[seg]; b != nil {
					b.refs++
					t.hostBufs = append(t.hostBufs, b)
				}
			}
		}
	}
}

func (b *HostBuffer) close() error {
	hostmem.Unregister(b.seg)
	return b.seg.Close()
}

// closeHostBuffers frees every buffer still held: it takes them under
// w.mu and unmaps them outside it.
func (w *Worker) closeHostBuffers() error {
	w.mu.Lock()
	var held []*HostBuffer
	for tok, b := range w.hostBufs {
		b.freed = true
		delete(w.hostBufs, tok)
		delete(w.hostBufSegs, b.seg)
		held = append(held, b)
	}
	w.mu.Unlock()
	var first error
	for _, b := range held {
		if err := b.close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
