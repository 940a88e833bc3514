package engine

import "simpler/engine/internal/core"

// Dependencies are inferred over byte ranges by the core (its deps.go
// says the rules); the engine says which bytes each argument touches, in
// which address space: host memory, a NEXT_LEVEL worker's device memory,
// or a remote allocation (owner, buffer, generation, addresses in the
// owner's allocation, so an owner's and an importer's views of a range
// are one range).

// The address spaces besides a worker's device memory (its id).
const (
	hostSpace    = -1
	remoteSpace  = -2
	memberDevice = -3 // a task member's own device memory, when only tensors of one member are compared
)

// record makes t, just submitted to the core, part of its run: its edges
// in the dependency map (wire), the host buffers it holds until it
// retires, and the remote buffers a remote node's member names. Caller
// holds w.mu.
func (r *Run) record(t *Task) {
	w := r.w
	r.race.submit(t)
	r.wire(t)
	w.hostBufs.ref(t)
	for m := range t.args {
		if t.args[m].Remote != nil {
			r.captureRemote(t.args[m].Remote)
		}
	}
	if w.events.on() {
		w.events.emit(Event{Kind: TaskSubmitted, Run: r.id, Task: t.ID(), Members: len(t.args), Callable: t.handle.Name(), Deps: t.Deps()})
	}
}

// wire records t's producers and makes t the writer or a reader of the
// bytes it touches. It runs under the Worker's mutex, in submit order.
func (r *Run) wire(t *Task) {
	for m := range t.args {
		a := &t.args[m]
		if a.Remote != nil {
			r.wireRemote(t, a)
			continue
		}
		space := hostSpace
		if job := t.Job(); job.Pool == NextLevel {
			space = job.Worker
			if job.Group != nil {
				space = job.Group[m]
			}
		}
		for i, ten := range a.Tensors {
			tag := a.Tags[i]
			if !tag.Reads() && !tag.Writes() {
				continue // NO_DEP: no memory to order on
			}
			k, lo := addrOf(ten, space)
			r.access(t, k, lo, ten, tag)
		}
	}
}

// wireRemote is wire for a remote node's member: its tensors lie in
// remote buffers, or in the task frame (no memory to order on).
func (r *Run) wireRemote(t *Task, a *TaskArgs) {
	for i, ten := range a.Tensors {
		tag, ref := a.Tags[i], a.Remote[i]
		if ref.Buf == nil || !tag.Reads() && !tag.Writes() {
			continue // carried in the frame, or NO_DEP: no memory to order on
		}
		k, lo := ref.place()
		r.access(t, k, lo, ten, tag)
	}
}

// access makes t a reader or writer, as tag says, of ten's bytes from lo
// in space k.
func (r *Run) access(t *Task, k core.SpaceKey, lo uint64, ten Tensor, tag Tag) {
	if ten.Strides != nil && ten.Elems() > 0 {
		r.core.AccessStrided(&t.Task, k, layoutOf(ten, lo), tag.Reads(), tag.Writes())
		return
	}
	// A tensor of no bytes orders like one byte at its address, so an
	// empty tensor still serves as a dependency token.
	hi := lo + uint64(max(ten.spanBytes(), 1))
	r.core.Access(&t.Task, k, lo, hi, tag.Reads(), tag.Writes())
}
