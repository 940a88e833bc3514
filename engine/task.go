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

// newTask makes the task a submit of h adds to o's run, under w.mu: a
// copy of each member's arguments (the caller may change its own), the
// heap blocks it takes (fresh: its runtime OUTPUTs need some) and holds,
// its place in the core's DAG, and its edges and holds there (record).
// The driver then publishes it.
func (o *Orchestrator) newTask(op string, h *Handle, job core.Job, cfg *CallConfig, argsList []*TaskArgs, fresh bool) (*Task, error) {
	t := &Task{handle: h, cfg: *cfg}
	t.Payload = t
	if len(argsList) == 1 {
		t.args = t.one[:]
	} else {
		t.args = make([]TaskArgs, len(argsList))
	}
	for m, a := range argsList {
		if a != nil {
			t.args[m] = a.clone()
		}
	}
	if err := o.holdHeap(op, t, argsList, fresh); err != nil {
		return nil, err
	}
	r := o.run
	o.w.core.Submit(&r.core, &t.Task, job, len(argsList))
	r.record(t)
	return t, nil
}

// clone copies a so that later changes by the caller do not reach a task.
func (a *TaskArgs) clone() TaskArgs {
	return TaskArgs{Tensors: append([]Tensor(nil), a.Tensors...), Tags: append([]Tag(nil), a.Tags...), Scalars: append([]uint64(nil), a.Scalars...), Remote: append([]RemoteRef(nil), a.Remote...)}
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
