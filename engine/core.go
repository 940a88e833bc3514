package engine

import "simpler/engine/internal/core"

// The decision logic of a Worker's runs is package core's: runs, tasks,
// their dependency map, the task window, the scheduler. A Worker makes one
// core at Init and its driver (driver.go) steps it under w.mu; each step
// says in a core.Effects what follows (assignments to start, members to
// stop, waiters to wake, a run that fenced), which the driver carries out
// once it has unlocked (apply, route, Run.finish). The engine's Task and Run wrap the core's and
// hang on them what running needs: callables, arguments, heap blocks,
// cleanups.

// Pool says which kind of endpoint a task runs on.
type Pool = core.Pool

// The endpoint pools.
const (
	NextLevel = core.NextLevel // chips at L3, child workers at L4 and up
	Sub       = core.Sub       // SUB workers
)

// Assignment is one member of a task placed on one endpoint.
type Assignment = core.Assignment

// Effects is what one or more core steps ask of the Worker.
type Effects = core.Effects

// newCore makes w's core: its endpoints, its task window and order rule,
// and the hooks by which a step names a failure and lets go of what a
// retiring task held (both under w.mu, which guards the heap and the host
// buffers). Caller holds w.mu.
func newCore(w *Worker) *core.Core {
	failed := func(a Assignment, err error) error {
		t := taskOf(a.Task)
		return taskError(t.ID(), w.workerName(a.Pool, a.Target), t.handle.Name(), err)
	}
	c := core.New(core.Config{
		Next:         w.NextCount(),
		Sub:          w.cfg.NumSubWorkers,
		Window:       w.cfg.TaskWindow,
		OrderHazards: w.cfg.OrderHazards,
		NotStarted:   ErrNotStarted,
		Fail:         failed,
		Late:         lateError,
		Release:      releaseTask,
		Check:        w.heap.checkInvariants,
	})
	for id := range w.NextCount() {
		if d := w.tree.next(id).depth(); d > 1 {
			c.SetDepth(id, d)
		}
	}
	return c
}

// releaseTask lets go of the heap blocks and host buffers a retiring task
// held. Caller holds w.mu.
func releaseTask(ct *core.Task) {
	t := taskOf(ct)
	for _, b := range t.heap {
		b.ring.unref(b)
	}
	t.heap = nil
	for _, b := range t.hostBufs {
		b.refs--
	}
	t.hostBufs = nil
}

// taskOf is the engine's Task of the core's t.
func taskOf(t *core.Task) *Task { return t.Payload.(*Task) }

// runOf is the engine's Run of the core's r.
func runOf(r *core.Run) *Run { return r.Payload.(*Run) }

// memberKey names one member of one task: how endpoints, deadlines and
// stops find a running member.
type memberKey struct {
	t      *core.Task
	member int
}
