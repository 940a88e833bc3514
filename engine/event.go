package engine

import "time"

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

// Observe sets the worker's observer (nil turns events off). Set it before
// Init: events are then reported for everything the worker does.
func (w *Worker) Observe(fn Observer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.observer = fn
}

// now is when things happen: the wall clock, or the schedule's virtual
// time under --seed (so a trace replays too).
func (w *Worker) now() time.Time {
	if w.cfg.Det != nil {
		return w.cfg.Det.Clock()
	}
	return time.Now()
}

func (w *Worker) emit(e Event) {
	if w.observer != nil {
		e.At = w.now()
		w.observer(e)
	}
}

// observeKernel runs a level-2 run(kernel, args) and reports it as a run
// of its own with one task on the chip's lane, submitted, started and
// finished like a level-3 task: otherwise a level-2 script's trace and
// progress line would show no task at all.
func (w *Worker) observeKernel(callable string, run func() error) error {
	if w.observer == nil {
		return run()
	}
	w.mu.Lock()
	w.runSeq++
	id := w.runSeq
	w.mu.Unlock()
	lane := w.workerName(NextLevel, 0)
	w.emit(Event{Kind: TaskSubmitted, Run: id, Task: 1, Members: 1, Callable: callable})
	w.emit(Event{Kind: TaskStarted, Run: id, Task: 1, Worker: lane, Callable: callable})
	err := run()
	w.emit(Event{Kind: TaskFinished, Run: id, Task: 1, Worker: lane, Callable: callable, Err: err})
	return err
}
