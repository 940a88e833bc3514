package engine

// What a cancel did, task by task. A cancel asks the endpoints to stop
// what they run and settles nothing itself: each member ends as its
// endpoint reports (core.Core.Complete), so a task that ran to its end
// while the cancel was on its way counts as run, with its own outcome, and
// a caller that retries what was cancelled never applies work twice.

import (
	"fmt"
	"strings"
)

// ErrNotStarted is what an endpoint reports for a member it was asked to
// stop before the member started: nothing of it ran. Endpoints report it,
// or an error that wraps it (errors.Is).
var ErrNotStarted error = &Error{Kind: RuntimeError, Msg: "cancelled before it started"}

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
	notStarted, stopped := r.core.CancelReport()
	rep := &CancelReport{Run: r.id, Tasks: r.core.Tasks(), NotStarted: notStarted, Stopped: stopped}
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
