package engine

import (
	"strconv"
	"sync/atomic"

	"simpler/wire"
)

// Access is what a remote buffer handle may be used for: the same bits
// the wire carries.
type Access = wire.Access

// The access bits.
const (
	AccessRead  = wire.AccessRead
	AccessWrite = wire.AccessWrite
	AccessRW    = wire.AccessReadWrite
)

// ParseAccess accepts "read", "write" and "readwrite".
func ParseAccess(s string) (Access, error) {
	switch s {
	case "read":
		return AccessRead, nil
	case "write":
		return AccessWrite, nil
	case "readwrite":
		return AccessRW, nil
	}
	return 0, Errorf(ValueError, "access must be \"read\", \"write\" or \"readwrite\", got %q", s)
}

// RemoteBuffer is a handle on remote memory: an owner allocation, or an
// imported view of one on another worker. Its identity never changes once
// made. Its lifetime is decided by its Ledger (engine/remote's remote
// buffers of the Worker that made it); the engine keeps only the two parts
// of it the submit path touches: the holds its tasks take, and whether the
// user released it, which submit checks.
type RemoteBuffer struct {
	Worker   int    // the worker that can consume it
	Owner    int    // the worker that owns the memory
	BufferID uint64 // owner allocation identity, with Generation
	Gen      uint64
	ImportID uint64 // 0 for an owner handle
	NBytes   int
	Offset   int // where an imported view starts in the owner allocation
	Access   Access
	Source   *RemoteBuffer // imported: the owner handle; nil for an owner
	Ledger   RemoteLedger  // decides when the memory goes; nil: nothing does

	holds    atomic.Int32 // tasks that captured it whose run has not passed its fence
	released atomic.Bool  // the user let go (remote_free / remote_release_import)
}

// Imported reports whether h is an imported view.
func (h *RemoteBuffer) Imported() bool { return h.Source != nil }

// Released reports whether the user released h.
func (h *RemoteBuffer) Released() bool { return h.released.Load() }

// SetReleased records whether the user released h: its Ledger sets it on a
// release, and clears it again when the free it issued failed (the memory
// is still there).
func (h *RemoteBuffer) SetReleased(v bool) { h.released.Store(v) }

// Holds is how many tasks hold h: they captured it at submit, and their
// run has not passed its fence. A ledger defers h's free while it is not 0.
func (h *RemoteBuffer) Holds() int { return int(h.holds.Load()) }

// RemoteLedger decides when a remote buffer's memory may go. The engine
// tells it only when a run's holds end.
type RemoteLedger interface {
	// Drop is called after a run's fence, outside the Worker's lock, with
	// the buffers the run's tasks held (each once per hold, the holds
	// already let go): a release deferred until now happens here.
	Drop(bufs []*RemoteBuffer) error
}

// capturedKey names the fence work that ends a run's holds.
type capturedKey struct{}

// captureRemote holds every remote buffer refs name (a remote node's
// task member), before its task can be dispatched; the first hold of a
// run registers the run's fence work that lets them go. Caller holds
// w.mu.
func (r *Run) captureRemote(refs []RemoteRef) {
	for _, ref := range refs {
		if ref.Buf == nil {
			continue
		}
		if len(r.captured) == 0 {
			r.onFence(FenceRemote, capturedKey{}, r.dropCaptured)
		}
		ref.Buf.holds.Add(1)
		r.captured = append(r.captured, ref.Buf)
	}
}

// dropCaptured lets go of r's holds at its fence and hands the buffers to
// their ledgers, each ledger its own in one call. The fence owns r by now:
// no task of r can capture more.
func (r *Run) dropCaptured() error {
	bufs := r.captured
	r.captured = nil
	for _, b := range bufs {
		b.holds.Add(-1)
	}
	var first error
	for len(bufs) > 0 {
		l := bufs[0].Ledger
		var mine, rest []*RemoteBuffer
		for _, b := range bufs {
			if b.Ledger == l {
				mine = append(mine, b)
			} else {
				rest = append(rest, b)
			}
		}
		if l != nil {
			if err := l.Drop(mine); err != nil && first == nil {
				first = err
			}
		}
		bufs = rest
	}
	return first
}

// UsedAfterRelease is the error for a remote buffer handle (or an export
// of one) used after remote_free or remote_release_import: a RuntimeError,
// as a freed host tensor and a released domain are. The handle itself is
// well formed; what it names is gone.
func UsedAfterRelease(op, what string) error {
	return Errorf(RuntimeError, "%s: %s was released (remote_free or remote_release_import); it cannot be used any more", op, what)
}

// RangeError says why n bytes at offset do not fit a size-byte buffer,
// with the numbers as given: an offset at or past the end, an empty
// range, or a range that runs past the end (by how much). It never forms
// offset+n, so an offset near the top of the range cannot wrap round into
// a message that hides it. Callers call it once a range has failed
// bounds.Fits (or is empty where a byte is needed).
func RangeError(op string, offset, n, size uint64) error {
	switch {
	case offset >= size:
		return Errorf(ValueError, "%s: offset %d is not inside the %d-byte buffer (its last byte is at offset %d)", op, offset, size, max(size, 1)-1)
	case n == 0:
		return Errorf(ValueError, "%s: 0 bytes at offset %d: the range must hold at least one byte", op, offset)
	}
	return Errorf(ValueError, "%s: %d bytes at offset %d run %s past the end of the %d-byte buffer", op, n, offset, byteCount(n-(size-offset)), size)
}

// byteCount is "1 byte" or "n bytes".
func byteCount(n uint64) string {
	if n == 1 {
		return "1 byte"
	}
	return strconv.FormatUint(n, 10) + " bytes"
}
