package core

// Task is one node of a run's DAG as the core sees it: a single task or a
// group whose members run at once on several endpoints. The engine keeps
// what a task runs (its callable, arguments, heap blocks) in its own
// value, which Payload points to; the core never looks at it.
type Task struct {
	Payload any

	id        int
	run       *Run
	job       Job
	pending   int     // unfinished producers, plus one while held
	consumers []*Task // tasks waiting on this one
	remaining int     // members whose outcome is not yet recorded
	err       error   // why it failed: its own error (root) or a producer's
	poison    error   // the first failed producer's error
	deps      []int   // producers' ids, kept only while the run is observed
	done      bool
	root      bool      // err came from running this task
	ended     MemberEnd // how its members ended: what a cancel reports of it
}

// Job is where a task runs, the part of it the scheduler reads.
type Job struct {
	Pool     Pool
	Worker   int   // single NEXT_LEVEL task: its worker; group: -1
	Group    []int // NEXT_LEVEL group: its workers, member i on Group[i]
	SubGroup int   // SUB group: number of members (0 for single tasks)
}

func (j *Job) isGroup() bool { return j.Group != nil || j.SubGroup > 0 }

// ID is the task's number within its run, from 1 in submit order.
func (t *Task) ID() int { return t.id }

// Run is the run the task belongs to.
func (t *Task) Run() *Run { return t.run }

// Job is where the task runs.
func (t *Task) Job() *Job { return &t.job }

// Err is why the task failed (nil: it has not, or not yet).
func (t *Task) Err() error { return t.err }

// Done reports whether the task has retired.
func (t *Task) Done() bool { return t.done }

// Pending is how many producers the task still waits for.
func (t *Task) Pending() int { return t.pending }

// Deps is the ids of the task's producers, finished or not, when its run
// is observed (nil otherwise): what a trace shows.
func (t *Task) Deps() []int { return t.deps }

// dependOn adds producer p to t unless it is already there or finished: a
// producer that failed already poisons t at once.
func (t *Task) dependOn(p *Task) {
	if t.run.observed && (len(t.deps) == 0 || t.deps[len(t.deps)-1] != p.id) {
		t.deps = append(t.deps, p.id)
	}
	if p.done {
		if p.err != nil && t.poison == nil {
			t.poison = p.err
		}
		return
	}
	if n := len(p.consumers); n > 0 && p.consumers[n-1] == t {
		return // already waiting on p through another range
	}
	p.consumers = append(p.consumers, t)
	t.pending++
}

// retiredClean reports whether t retired without failing: waiting for it
// is no wait.
func retiredClean(t *Task) bool { return t.done && t.err == nil }

// MemberEnd is how a task's members ended, as bits: a group's members may
// end differently (one ran, another was stopped).
type MemberEnd uint8

// How a member ended.
const (
	MemberRan        MemberEnd = 1 << iota // ran to its end, whatever its outcome
	MemberStopped                          // stopped while it ran
	MemberNotStarted                       // never started
)

// Consumers is the tasks waiting on t (none once it retired).
func (t *Task) Consumers() []*Task { return t.consumers }
