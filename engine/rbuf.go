package engine

import "simpler/wire"

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
