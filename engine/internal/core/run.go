package core

import "slices"

// ID is the run's number within its Worker.
func (r *Run) ID() uint64 { return r.id }

// Tasks is how many tasks the run submitted.
func (r *Run) Tasks() int { return r.tasks }

// Inflight is how many of its tasks have not retired.
func (r *Run) Inflight() int { return r.inflight }

// Building reports whether its orchestration function still runs.
func (r *Run) Building() bool { return r.building }

// Fenced reports whether the run reached its fence.
func (r *Run) Fenced() bool { return r.fenced }

// Cancelled is why the run was cancelled (nil: it was not).
func (r *Run) Cancelled() error { return r.cancelled }

// Held reports whether t is a ready task held behind earlier runs.
func (r *Run) Held(t *Task) bool { return slices.Contains(r.held, t) }

// FirstErr is the error of the root failure with the lowest task id (nil:
// none failed).
func (r *Run) FirstErr() error {
	if r.firstErr == nil {
		return nil
	}
	return r.firstErr.err
}

// Cut reports whether a cancel cut the run short: a task did not run to
// its end. (An orchestration function that a cancel stopped fails, and
// the engine returns its error; one that returned all the same has run
// to its end.)
func (r *Run) Cut() bool {
	return r.cancelled != nil && (len(r.notStarted) > 0 || len(r.stopped) > 0)
}

// CancelReport is what the cancel cut short, by task id, in increasing
// order: tasks that did not start, and tasks stopped while they ran.
func (r *Run) CancelReport() (notStarted, stopped []int) {
	return sortedIDs(r.notStarted), sortedIDs(r.stopped)
}

// ObserveEdges sets the hook that hears every pair of tasks of r touching
// the same bytes (the race detector's).
func (r *Run) ObserveEdges(fn func(t, p *Task, h Hazard)) { r.edge = fn }

// noteCancelled records, as t of cancelled run r retires, whether the
// cancel cut it short: not started (no member ran), or stopped (a member
// was stopped, or some ran and some never started). Such a task's error
// is the cancel; a task whose members all ran keeps its own outcome.
func (r *Run) noteCancelled(t *Task) {
	switch {
	case t.ended&(memberStopped|memberNotStarted) == 0:
		return
	case t.ended == memberNotStarted:
		r.notStarted = append(r.notStarted, int(t.id))
	default:
		r.stopped = append(r.stopped, int(t.id))
	}
	t.err, t.root = r.cancelled, false
}

// sortedIDs is ids in increasing order (tasks retire in any order).
func sortedIDs(ids []int) []int {
	out := append([]int(nil), ids...)
	slices.Sort(out)
	return out
}
