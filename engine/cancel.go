package engine

// What a cancel did, task by task. A cancel asks the endpoints to stop
// what they run and settles nothing itself: each member ends as its
// endpoint reports (core.recordStopped), so a task that ran to its end
// while the cancel was on its way counts as run, with its own outcome, and
// a caller that retries what was cancelled never applies work twice.

import (
	"fmt"
	"slices"
	"strings"
)

// ErrNotStarted is what an endpoint reports for a member it was asked to
// stop before the member started: nothing of it ran. Endpoints report it,
// or an error that wraps it (errors.Is).
var ErrNotStarted error = &Error{Kind: RuntimeError, Msg: "cancelled before it started"}

// memberEnd is how a task's members ended, as bits: a task's members may
// end differently (one of a group ran, another was stopped).
type memberEnd uint8

const (
	memberRan        memberEnd = 1 << iota // ran to its end, whatever its outcome
	memberStopped                          // stopped while it ran
	memberNotStarted                       // never started
)

// noteCancelled records, as t of cancelled run r retires, whether the
// cancel cut it short: not started (no member ran), or stopped (a member
// was stopped, or some ran and some never started). Such a task's error is
// the cancel; a task whose members all ran keeps its own outcome.
func (r *Run) noteCancelled(t *Task) {
	switch {
	case t.ended&(memberStopped|memberNotStarted) == 0:
		return
	case t.ended == memberNotStarted:
		r.notStarted = append(r.notStarted, t.ID)
	default:
		r.stopped = append(r.stopped, t.ID)
	}
	t.err, t.root = r.cancelled, false
}

// cut reports whether a cancel cut r short: a task did not run to its
// end. (An orchestration function that a cancel stopped fails, and Submit
// returns its error; one that returned all the same has run to its end.)
func (r *Run) cut() bool {
	return r.cancelled != nil && (len(r.notStarted) > 0 || len(r.stopped) > 0)
}

// CancelReport says what a cancel cut short of a run, by task id; the
// run's other tasks ran to their end. Wait's error carries it
// (errors.As).
type CancelReport struct {
	Run        uint64
	Tasks      int   // how many the run submitted
	NotStarted []int // never started: retrying them applies them once
	Stopped    []int // stopped while they ran: what they wrote may be partial
}

func (c *CancelReport) Error() string {
	var parts []string
	if len(c.NotStarted) > 0 {
		parts = append(parts, taskList(c.NotStarted)+" did not start")
	}
	if len(c.Stopped) > 0 {
		parts = append(parts, taskList(c.Stopped)+" stopped while running")
	}
	if ran := c.Tasks - len(c.NotStarted) - len(c.Stopped); ran > 0 {
		parts = append(parts, fmt.Sprintf("%s ran to the end", plural(ran, "other task")))
	}
	return fmt.Sprintf("run %d cancelled: %s", c.Run, strings.Join(parts, "; "))
}

// cancelError is Wait's error for a run a cancel cut short.
func (r *Run) cancelError() error {
	rep := &CancelReport{Run: r.id, Tasks: r.tasks, NotStarted: sortedIDs(r.notStarted), Stopped: sortedIDs(r.stopped)}
	return &Error{Kind: RuntimeError, Msg: rep.Error(), Cause: rep}
}

// taskList names task ids, consecutive ones as a range: "task 3",
// "tasks 1-4, 7".
func taskList(ids []int) string {
	var b strings.Builder
	if len(ids) == 1 {
		b.WriteString("task ")
	} else {
		b.WriteString("tasks ")
	}
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if i > 0 {
			b.WriteString(", ")
		}
		if j == i {
			fmt.Fprint(&b, ids[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", ids[i], ids[j])
		}
		i = j + 1
	}
	return b.String()
}

// plural is "1 task", "2 tasks".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// sortedIDs is ids in increasing order (tasks retire in any order).
func sortedIDs(ids []int) []int {
	out := append([]int(nil), ids...)
	slices.Sort(out)
	return out
}
