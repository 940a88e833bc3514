package engine

import "fmt"

// Task is one node of a run's DAG: a single task or a group whose members
// run at once on several endpoints.
type Task struct {
	ID     int // 1-based within its run, in submit order
	run    *Run
	handle *Handle
	job    schedJob
	args   []TaskArgs  // one per member
	one    [1]TaskArgs // backing of args for single tasks: one allocation less
	cfg    CallConfig

	pending   int     // unfinished producers
	consumers []*Task // tasks waiting on this one
	remaining int     // members whose outcome is not yet recorded
	err       error   // why it failed: its own error (root) or a producer's
	poison    error   // the first failed producer's error
	heap      []*heapBlock
	hostBufs  []*HostBuffer // host buffers it uses: each counts it until it retires
	deps      []int         // producers' ids, kept only while observed
	// The flags sit together: a Task is allocated per submit, and 8 bytes
	// of padding between them put it in the next size class.
	done  bool
	root  bool      // err came from running this task
	ended memberEnd // how its members ended: what a cancel reports of it
}

// TaskError is a task's failure as the caller sees it: where it failed
// (a path down the worker tree, e.g. "child_worker 0 > sub_worker 1"), the
// task and callable that failed there, and why.
type TaskError struct {
	TaskID   int
	Worker   string
	Callable string
	Err      error
}

func (e *TaskError) Error() string {
	k := KindOf(e.Err)
	_, msg, _ := SplitKind(e.Err.Error())
	return fmt.Sprintf("%s: %s: task %d running %q failed: %s", k, e.Worker, e.TaskID, e.Callable, msg)
}

func (e *TaskError) Unwrap() error { return e.Err }

// taskError makes the error of a task that failed on worker; a failure
// that came up from a child keeps its own task and callable, and the path
// grows by this level.
func taskError(id int, worker, callable string, err error) *TaskError {
	if inner, ok := err.(*TaskError); ok {
		return &TaskError{TaskID: inner.TaskID, Worker: worker + " > " + inner.Worker, Callable: inner.Callable, Err: inner.Err}
	}
	return &TaskError{TaskID: id, Worker: worker, Callable: callable, Err: err}
}

// dependOn adds producer p to t unless it is already there or finished.
func (t *Task) dependOn(p *Task) {
	if t.run.observed && (len(t.deps) == 0 || t.deps[len(t.deps)-1] != p.ID) {
		t.deps = append(t.deps, p.ID) // for traces: every producer, finished or not
	}
	if p.done {
		if p.err != nil && t.poison == nil {
			t.poison = p.err
		}
		return
	}
	if n := len(p.consumers); n > 0 && p.consumers[n-1] == t {
		return // already waiting on p through another tensor
	}
	p.consumers = append(p.consumers, t)
	t.pending++
}
