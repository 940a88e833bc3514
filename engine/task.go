package engine

import (
	"fmt"

	"simpler/engine/internal/core"
)

// Task is one node of a run's DAG: a single task or a group whose members
// run at once on several endpoints. Its place in the DAG (id, producers,
// consumers, outcome) is the core's Task inside it; the rest is what
// running it needs.
type Task struct {
	core.Task
	handle   *Handle
	args     []TaskArgs  // one per member
	one      [1]TaskArgs // backing of args for single tasks: one allocation less
	cfg      CallConfig
	heap     []*heapBlock
	hostBufs []*HostBuffer // host buffers it uses: each counts it until it retires
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
