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
}

// Addr is the buffer's host address.
func (b *HostBuffer) Addr() uint64 { return b.seg.Addr() }

// CreateHostBuffer makes a zeroed host buffer of nbytes owned by w; close
// frees what is left.
func (w *Worker) CreateHostBuffer(nbytes int) (*HostBuffer, error) {
	if nbytes <= 0 {
		return nil, Errorf(ValueError, "create_host_buffer: nbytes must be > 0, got %d", nbytes)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable("create_host_buffer"); err != nil {
		return nil, err
	}
	seg, err := shm.Create("hostbuf", nbytes)
	if err != nil {
		return nil, Wrap(err, "create_host_buffer")
	}
	hostmem.Register(seg)
	w.bufSeq++
	b := &HostBuffer{Token: w.bufSeq, NBytes: nbytes, seg: seg}
	w.hostBufs[b.Token] = b
	return b, nil
}

// FreeHostBuffer frees a host buffer; freeing it again is a no-op.
func (w *Worker) FreeHostBuffer(b *HostBuffer) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hostBufs[b.Token] != b {
		return nil
	}
	delete(w.hostBufs, b.Token)
	return b.close()
}

func (b *HostBuffer) close() error {
	hostmem.Unregister(b.seg)
	return b.seg.Close()
}

// closeHostBuffers frees every buffer still held. Caller holds w.mu.
func (w *Worker) closeHostBuffers() error {
	var first error
	for tok, b := range w.hostBufs {
		if err := b.close(); err != nil && first == nil {
			first = err
		}
		delete(w.hostBufs, tok)
	}
	return first
}
