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
	owner  *HostBuffers
	refs   int  // tasks in flight that use it (w.mu)
	freed  bool // (w.mu)
}

// Addr is the buffer's host address.
func (b *HostBuffer) Addr() uint64 { return b.seg.Addr() }

// HostBuffers are a Worker's host buffers, by token and by the object
// behind each. An object is made, mapped and unmapped outside w.mu; the
// maps, the sequence and every buffer's refs and freed are guarded by the
// Worker's mu all the same, because the submit that counts a task against
// its buffers (ref) holds it already: a lock of their own would be one
// more lock per task.
type HostBuffers struct {
	w       *Worker
	byToken map[uint64]*HostBuffer
	bySeg   map[*shm.Segment]*HostBuffer
	seq     uint64 // the last token given
}

func newHostBuffers(w *Worker) HostBuffers {
	return HostBuffers{w: w, byToken: map[uint64]*HostBuffer{}, bySeg: map[*shm.Segment]*HostBuffer{}}
}

// HostBuffers are the worker's host buffers.
func (w *Worker) HostBuffers() *HostBuffers { return &w.hostBufs }

// Create makes a zeroed host buffer of nbytes owned by the Worker; its
// close frees what is left.
func (hb *HostBuffers) Create(nbytes int) (*HostBuffer, error) {
	const op = "create_host_buffer"
	if nbytes <= 0 {
		return nil, Errorf(ValueError, "%s: nbytes must be > 0, got %d", op, nbytes)
	}
	w := hb.w
	w.mu.Lock()
	err := w.usable(op)
	w.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// The object is made and mapped outside w.mu, which every completion
	// takes; a close that came meanwhile is checked again under it.
	seg, err := shm.Create("hostbuf", nbytes)
	if err != nil {
		return nil, Wrap(err, op)
	}
	w.mu.Lock()
	if err := w.usable(op); err != nil {
		w.mu.Unlock()
		seg.Close()
		return nil, err
	}
	hostmem.Register(seg)
	hb.seq++
	b := &HostBuffer{Token: hb.seq, NBytes: nbytes, seg: seg, owner: hb}
	hb.byToken[b.Token] = b
	hb.bySeg[seg] = b
	w.mu.Unlock()
	return b, nil
}

// Free frees a host buffer; freeing it again is a no-op. A buffer that
// tasks in flight use is not freed: the free is refused.
func (hb *HostBuffers) Free(b *HostBuffer) error {
	return hb.Release("free_host_buffer", b)
}

// Release is Free with the name of the operation that asks
// (release_buffer frees the same kind of buffer), for its errors.
func (hb *HostBuffers) Release(op string, b *HostBuffer) error {
	w := hb.w
	w.mu.Lock()
	if hb.byToken[b.Token] != b {
		w.mu.Unlock()
		return nil
	}
	if refs := b.refs; refs > 0 {
		w.mu.Unlock()
		return Errorf(RuntimeError, "%s: host buffer %d is used by %d task(s) still in flight; wait for their run first", op, b.Token, refs)
	}
	delete(hb.byToken, b.Token)
	delete(hb.bySeg, b.seg)
	b.freed = true
	w.mu.Unlock()
	return b.close() // no task holds it and no submit can take it now: unmapped outside w.mu
}

// Freed reports whether the buffer was freed: a view of it must not be
// used any more (its memory may be another buffer's by now).
func (b *HostBuffer) Freed() bool {
	w := b.owner.w
	w.mu.Lock()
	defer w.mu.Unlock()
	return b.freed
}

// ref counts t against every host buffer its tensors lie in, so that the
// buffer is not freed under it. Caller holds w.mu.
func (hb *HostBuffers) ref(t *Task) {
	if len(hb.bySeg) == 0 {
		return
	}
	for m := range t.args {
		for _, ten := range t.args[m].Tensors {
			if ten.ChildMemory {
				continue
			}
			if seg, _, ok := hostmem.Locate(ten.Addr); ok {
				if b := hb.bySeg[seg]; b != nil {
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

// closeAll frees every buffer still held: it takes them under w.mu and
// unmaps them outside it.
func (hb *HostBuffers) closeAll() error {
	w := hb.w
	w.mu.Lock()
	var held []*HostBuffer
	for tok, b := range hb.byToken {
		b.freed = true
		delete(hb.byToken, tok)
		delete(hb.bySeg, b.seg)
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
