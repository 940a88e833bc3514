package engine

import (
	"strconv"

	"simpler/internal/bounds"
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
// imported view of one on another worker. Its lifetime is decided by the
// registry below, a state machine with no I/O: calls return the physical
// actions (owner frees, import releases) that their caller must carry out.
type RemoteBuffer struct {
	Worker   int    // the worker that can consume it
	Owner    int    // the worker that owns the memory
	BufferID uint64 // owner allocation identity, with Generation
	Gen      uint64
	ImportID uint64 // 0 for an owner handle
	NBytes   int
	Offset   int // where an imported view starts in the owner allocation
	Access   Access

	released bool          // the user let go (remote_free / remote_release_import)
	done     bool          // the physical free or import release was issued
	slotRefs int           // tasks that captured it and have not reached the fence
	imports  int           // owner: live imported views
	source   *RemoteBuffer // imported: the owner handle
}

// Imported reports whether h is an imported view.
func (h *RemoteBuffer) Imported() bool { return h.source != nil }

// Released reports whether the user released h.
func (h *RemoteBuffer) Released() bool { return h.released }

// Freed reports whether h's physical action was issued and not undone: the
// free of an owner allocation, the release of an imported view.
func (h *RemoteBuffer) Freed() bool { return h.done }

// RemoteAction is physical work the registry decided on.
type RemoteAction struct {
	Free          *RemoteBuffer // free this owner allocation on its owner
	ReleaseImport *RemoteBuffer // drop this imported mapping on its importer
}

// The registry's transitions, guarded by the Worker's mutex.

// release marks h released and returns what may happen now.
func release(h *RemoteBuffer) []RemoteAction {
	if h.released {
		return nil // idempotent
	}
	h.released = true
	return settle(h, nil)
}

// failed undoes an owner free that could not be carried out (the node
// refused it, the connection failed, a fault point fired): the memory is
// still there, so the handle is live again, unreleased, and a later
// remote_free issues the free anew instead of being a no-op on a handle
// that only looks freed. It returns whether it undid anything. An import
// release is not undone: its owner's free may already have followed it.
func failed(a RemoteAction) bool {
	h := a.Free
	if h == nil || h.Imported() || !h.done {
		return false
	}
	h.done, h.released = false, false
	return true
}

// capture takes a slot ref for a task that uses h.
func capture(h *RemoteBuffer) { h.slotRefs++ }

// drop releases a slot ref at the task's run fence.
func drop(h *RemoteBuffer) []RemoteAction {
	h.slotRefs--
	return settle(h, nil)
}

// importFrom records a new imported view of owner.
func importFrom(owner *RemoteBuffer, view *RemoteBuffer) {
	view.source = owner
	owner.imports++
}

// settle issues h's physical action once nothing holds it: an imported
// view when its slot refs drain (which may in turn let its owner go); an
// owner when its slot refs and imports drain.
func settle(h *RemoteBuffer, acts []RemoteAction) []RemoteAction {
	if !h.released || h.done || h.slotRefs > 0 {
		return acts
	}
	if h.source != nil {
		h.done = true
		acts = append(acts, RemoteAction{ReleaseImport: h})
		h.source.imports--
		return settle(h.source, acts)
	}
	if h.imports > 0 {
		return acts
	}
	h.done = true
	return append(acts, RemoteAction{Free: h})
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

// checkRange is RangeError for the signed values of a call: nil when n
// bytes at offset lie inside size bytes and n > 0.
func checkRange(op string, offset, n, size int) error {
	switch {
	case offset < 0:
		return Errorf(ValueError, "%s: offset %d is negative", op, offset)
	case n < 0 && offset < size:
		return Errorf(ValueError, "%s: nbytes %d is negative", op, n)
	case n > 0 && bounds.FitsInt(offset, n, size):
		return nil
	case n < 0:
		n = 0 // the offset is past the end: that is what to say
	}
	return RangeError(op, uint64(offset), uint64(n), uint64(max(size, 0)))
}
