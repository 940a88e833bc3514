package engine

import (
	"sync/atomic"
	"time"
)

// EventKind says what an Event records.
type EventKind uint8

// The event kinds.
const (
	TaskSubmitted EventKind = iota
	TaskStarted
	TaskFinished
	DomainAllocated
	DomainReleased
	DomainFreed
	RunFenced
	GlobalStep // one global-domain command on one node, timed by the broker
	RemoteSpan // work a remote node did for a task, reported with its completion (Node, Lane, Callable, Dur, Ago)
	RemoteCopy // a copy to or from a remote buffer, timed by the parent (Worker names the node, Callable the copy, Bytes, Dur)
)

// Event is one thing that happened in a Worker, for traces and progress
// lines. Fields not meaningful for a kind are zero.
type Event struct {
	Kind     EventKind
	At       time.Time
	Run      uint64
	Task     int    // task id within the run
	Member   int    // group member
	Worker   string // endpoint name, e.g. "chip_worker 1 (device 1)"
	Callable string
	Deps     []int // producers' task ids (TaskSubmitted)
	Members  int   // TaskSubmitted: how many members the task has (a group's, one per args)
	Err      error // TaskFinished with a failure
	Domain   string
	AllocID  uint64
	Dur      time.Duration // GlobalStep: how long the node took (Callable names the command); RemoteSpan, RemoteCopy: how long it lasted
	Node     string        // RemoteSpan: the node, as errors name it ("remote_worker 1")
	Lane     string        // RemoteSpan: where on the node (a chip's endpoint, or "orchestration")
	Ago      time.Duration // RemoteSpan: how long before At it ended (placed by the node's clock)
	Bytes    uint64        // RemoteCopy: bytes copied
}

// Observer receives events synchronously, from whichever goroutine caused
// them; it must be quick and safe for concurrent use.
type Observer func(Event)

// Events is a Worker's observer and the clock its events are stamped
// with. It takes no lock: the observer is one atomic pointer, so it may be
// set while the Worker runs, and reading it on the task path costs a load
// as the plain field it replaces did.
type Events struct {
	fn  atomic.Pointer[Observer] // nil: no events
	det *Det                     // the clock under --seed; nil: the wall clock
}

// Events is the worker's event stream.
func (w *Worker) Events() *Events { return &w.events }

// Observe sets the observer (nil turns events off). Set it before Init:
// events are then reported for everything the worker does.
func (e *Events) Observe(fn Observer) {
	if fn == nil {
		e.fn.Store(nil)
		return
	}
	e.fn.Store(&fn)
}

// on reports whether anyone observes: callers test it before building an
// Event they would otherwise throw away.
func (e *Events) on() bool { return e.fn.Load() != nil }

// now is when things happen: the wall clock, or the schedule's virtual
// time under --seed (so a trace replays too).
func (e *Events) now() time.Time {
	if e.det != nil {
		return e.det.Clock()
	}
	return time.Now()
}

func (e *Events) emit(ev Event) {
	if fn := e.fn.Load(); fn != nil {
		ev.At = e.now()
		(*fn)(ev)
	}
}
