package remote

// Remote buffers are a role of a level-4 Worker (engine.Worker.Role):
// remote_malloc, remote_free, remote_release_import, the copies, exports
// and imports, each a command on the node's ordered lane. The Worker knows
// of them only what its submit path needs (the holds its tasks take on a
// handle, engine/rbuf.go); each handle names its role as its Ledger, which
// the engine calls after a run's fence with the handles the run's tasks
// held.
//
// The calls that read or write a buffer's bytes, or make one, are direct
// control: ordered against runs by the engine's gate
// (engine.DirectControl.Gate) before they send anything. A release is not
// gated: it sends nothing while a task still holds the buffer, and frees
// after.
//
// Nothing is left for close: a node's session ends with the Worker, and
// the buffers it holds with it; a handle released after close finds its
// node gone ("remote worker N is gone"), as before the role left the
// Worker.
//
// Lock order: a role's mu is a leaf. It is never held while calling into
// the Worker or a node; commands go out with no lock held. A handle's holds
// are counted by the engine (atomically, under its own lock) and read
// here under mu. A release on another goroutine between a submit's check
// that the handle is live and its capture is not ordered against that
// submit, now as when both took the Worker's lock.

import (
	"sync"

	"simpler/engine"
	"simpler/internal/bounds"
	"simpler/internal/fault"
	"simpler/wire"
)

// buffers is one Worker's remote buffers: its registry, and the commands
// that carry its decisions out.
type buffers struct {
	w  *engine.Worker
	mu sync.Mutex // guards reg
	// reg is the handles from their malloc or import until their physical
	// action went ahead.
	reg registry
}

// buffersKey names the role among the Worker's roles.
type buffersKey struct{}

// buffersOf is w's remote buffers, made on first use.
func buffersOf(w *engine.Worker) *buffers {
	return w.Role(buffersKey{}, func() any { return &buffers{w: w, reg: newRegistry()} }).(*buffers)
}

// ledgerOf is the role that made h.
func ledgerOf(op string, h *engine.RemoteBuffer) (*buffers, error) {
	b, ok := h.Ledger.(*buffers)
	if !ok {
		return nil, engine.Errorf(engine.ValueError, "%s: this handle was not made by remote_malloc or remote_import", op)
	}
	return b, nil
}

// Free releases an owner handle; the physical free waits for every task
// that holds it and every import. Freeing again is a no-op. A free that
// fails leaves the handle live, so Free may be called again.
func Free(h *engine.RemoteBuffer) error {
	const op = "remote_free"
	if h.Imported() {
		return engine.Errorf(engine.ValueError, "%s: this is an imported handle; release it with remote_release_import", op)
	}
	b, err := ledgerOf(op, h)
	if err != nil {
		return err
	}
	return b.release(h)
}

// ReleaseImport releases an imported handle once the tasks that hold it
// have passed their fence. Releasing again is a no-op.
func ReleaseImport(h *engine.RemoteBuffer) error {
	const op = "remote_release_import"
	if !h.Imported() {
		return engine.Errorf(engine.ValueError, "%s: this is an owner handle; free it with remote_free", op)
	}
	b, err := ledgerOf(op, h)
	if err != nil {
		return err
	}
	return b.release(h)
}

// Freed reports whether h's physical action was issued and not undone:
// the free of an owner allocation, the release of an imported view.
func Freed(h *engine.RemoteBuffer) bool {
	b, ok := h.Ledger.(*buffers)
	if !ok {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reg.freed(h)
}

func (b *buffers) release(h *engine.RemoteBuffer) error {
	b.mu.Lock()
	acts := b.reg.release(h)
	b.mu.Unlock()
	return b.carryOut(acts)
}

// Drop is the engine's call after a run's fence with the handles its
// tasks held (engine.RemoteLedger): a free or release deferred until now
// goes ahead here.
func (b *buffers) Drop(bufs []*engine.RemoteBuffer) error {
	b.mu.Lock()
	var acts []action
	for _, h := range bufs {
		acts = b.reg.settle(h, acts)
	}
	b.mu.Unlock()
	return b.carryOut(acts)
}

// carryOut sends the registry's physical actions, with no lock held. An
// owner free that fails leaves its handle live (failed), so remote_free
// can be tried again; everything else it did is forgotten.
func (b *buffers) carryOut(acts []action) error {
	var first error
	errs := make([]error, len(acts))
	for i, a := range acts {
		switch {
		case a.free != nil:
			if errs[i] = fault.Hit("remote.free", a.free.Owner); errs[i] == nil {
				errs[i] = b.command(a.free.Owner, &wire.Control{Cmd: wire.CmdFree, Buffer: ref(a.free)})
			}
		case a.releaseImport != nil:
			errs[i] = b.command(a.releaseImport.Worker, &wire.Control{Cmd: wire.CmdReleaseImport, Buffer: wire.BufferRef{ID: a.releaseImport.ImportID, Generation: 1}})
		}
		if errs[i] != nil && first == nil {
			first = errs[i]
		}
	}
	b.mu.Lock()
	for i, a := range acts {
		if errs[i] != nil && b.reg.failed(a) {
			continue // still live: it stays tracked
		}
		b.reg.forget(a)
	}
	b.mu.Unlock()
	return first
}

func ref(h *engine.RemoteBuffer) wire.BufferRef {
	return wire.BufferRef{ID: h.BufferID, Generation: h.Gen}
}

// command runs c on remote node id, if the Worker still holds it.
func (b *buffers) command(id int, c *wire.Control) error {
	n := b.w.Nodes().Remote(id)
	if n == nil {
		return engine.Errorf(engine.RuntimeError, "remote worker %d is gone", id)
	}
	_, err := n.Control(c)
	return err
}

// node is NEXT_LEVEL id's remote node for op, refusing other ids.
func (b *buffers) node(op string, id int) (engine.RemoteNode, error) {
	if !b.w.Nodes().IsRemote(id) {
		return nil, engine.Errorf(engine.ValueError, "%s: worker %d is not a remote node", op, id)
	}
	n := b.w.Nodes().Remote(id)
	if n == nil {
		return nil, engine.Errorf(engine.RuntimeError, "remote worker %d is gone", id)
	}
	return n, nil
}

// Watch copies owner buffer h at offset into dst without ordering it
// against runs. It is for Go tests and tools that watch a run from
// outside, such as a kernel's mark that it has started; scripts have no
// such call: theirs is remote_copy_from, ordered as the gate orders it.
func Watch(h *engine.RemoteBuffer, dst []byte, offset int) error {
	const op = "watch_remote"
	if err := ownerHandle(op, h, offset, len(dst)); err != nil {
		return err
	}
	b, err := ledgerOf(op, h)
	if err != nil {
		return err
	}
	return b.copyFrom(op, h, dst, offset)
}

// ownerHandle checks h for a bulk copy.
func ownerHandle(op string, h *engine.RemoteBuffer, offset, n int) error {
	switch {
	case h.Released():
		return engine.UsedAfterRelease(op, "the handle")
	case h.Imported():
		return engine.Errorf(engine.ValueError, "%s: takes an owner handle, not an imported one", op)
	}
	return checkRange(op, offset, n, h.NBytes)
}

// checkRange is engine.RangeError for the signed values of a call: nil
// when n bytes at offset lie inside size bytes and n > 0.
func checkRange(op string, offset, n, size int) error {
	switch {
	case offset < 0:
		return engine.Errorf(engine.ValueError, "%s: offset %d is negative", op, offset)
	case n < 0 && offset < size:
		return engine.Errorf(engine.ValueError, "%s: nbytes %d is negative", op, n)
	case n > 0 && bounds.FitsInt(offset, n, size):
		return nil
	case n < 0:
		n = 0 // the offset is past the end: that is what to say
	}
	return engine.RangeError(op, uint64(offset), uint64(n), uint64(max(size, 0)))
}
