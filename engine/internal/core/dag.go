package core

// The state of a run's DAG: its tasks, the run, and the range maps that
// record who touched which bytes. Only the types are here, so that the
// files that act on them (task.go, run.go, deps.go, sched.go, core.go)
// each refer to this file and not to each other in a circle.

// Task is one node of a run's DAG as the core sees it: a single task or a
// group whose members run at once on several endpoints. The engine keeps
// what a task runs (its callable, arguments, heap blocks) in its own
// value, which Payload points to; the core never looks at it.
type Task struct {
	Payload any

	run       *Run
	job       Job
	consumers []*Task // tasks waiting on this one
	err       error   // why it failed: its own error (root) or a producer's
	poison    error   // the first failed producer's error
	deps      []int   // producers' ids, kept only while the run is observed
	// The counts and flags sit together, the counts in 32 bits: a Task is
	// allocated per submit, and the engine's, which holds it, fits a
	// smaller size class so.
	id        int32
	pending   int32 // unfinished producers, plus one while held
	remaining int32 // members whose outcome is not yet recorded
	done      bool
	root      bool      // err came from running this task
	ended     memberEnd // how its members ended: what a cancel reports of it
}

// Run is one submission as the core sees it: its tasks' counts, its
// place in the order of runs, whether its function still builds it,
// its fence, its cancel and its first failure. The engine keeps the
// rest (its result, cleanups, waiters) in its own value, which Payload
// points to.
type Run struct {
	Payload any

	id       uint64
	spaces   map[SpaceKey]*rangeMap // who wrote and read which bytes (deps.go)
	tasks    int                    // submitted
	inflight int                    // submitted and not retired
	running  int                    // members started and not yet reported back
	held     []*Task                // ready tasks waiting for the runs before this one
	firstErr *Task                  // the root failure with the lowest task id

	// cancelled is why the run was cancelled (nil: it was not); what the
	// cancel cut short is listed as the tasks retire.
	cancelled           error
	notStarted, stopped []int

	building bool // the orchestration function has not returned
	fenced   bool
	observed bool // tasks keep their producers' ids (Task.Deps)
	ordered  bool // order_hazards: writes wait for earlier readers and writers
	// edge, if set, hears every pair of tasks that touch the same bytes,
	// ordered or not (the race detector's hook).
	edge func(t, p *Task, h Hazard)
}

// segment is [lo, hi) of one space: its last writer, the earlier writers
// that one did not wait for (upstream's insert-only writes; none under
// order_hazards), and the tasks that read it since the last write.
type segment struct {
	lo, hi    uint64
	writer    *Task
	unordered []*Task
	readers   []*Task
}

// stridedView is the accesses of one strided layout, kept like a
// segment's (lo and hi are its bounding range): views of the same layout
// share one, so a run that touches the same blocks again and again
// compares each access with every block once, not with every access.
type stridedView struct {
	segment
	l Layout
}

// rangeMap is one space's segments, sorted by lo and disjoint, and its
// strided views in the order they were first touched.
type rangeMap struct {
	segs    []segment
	strided []stridedView
}
