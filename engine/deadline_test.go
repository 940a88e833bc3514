package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Members' deadlines share one timer: it is set for the earliest, moves to
// the next when that member comes back or expires, and stops when no
// member with a deadline runs.
func TestDeadlinesShareOneTimer(t *testing.T) {
	sp := newSpace(t)
	w := liveWorker(t)
	x, _ := hostI64(t, sp, 1)
	y, _ := hostI64(t, sp, 1)
	timerAt := func() int64 { return locked(w, func() int64 { return w.deadlines.at }) }
	var longAt int64
	var short *Task
	err := runDone(t, w, func(o *Orchestrator) error {
		must(o.SubmitNext(kernel(t, w, "spin"), mkArgs(y, OutputExisting), &CallConfig{Timeout: time.Hour}, 1))
		if err := until("the long deadline's timer", func() bool { return timerAt() != 0 }); err != nil {
			return err
		}
		longAt = timerAt()
		short = must(o.SubmitNext(kernel(t, w, "spin"), mkArgs(x, OutputExisting), &CallConfig{Timeout: 50 * time.Millisecond}, 0))
		if err := until("the short deadline's timer", func() bool { return timerAt() != longAt }); err != nil {
			return err
		}
		if at := timerAt(); at >= longAt {
			t.Errorf("a deadline of 50ms after one of an hour: the timer is at %d, the hour's at %d", at, longAt)
		}
		if err := until("the short one to expire and the timer to move back", func() bool { return timerAt() == longAt }); err != nil {
			return err
		}
		o.Run().Cancel() // the long one ends as its endpoint reports it
		return nil
	})
	if !strings.Contains(fmt.Sprint(err), "task 1 stopped while running; 1 other task ran to the end") {
		t.Errorf("the run: %v", err)
	}
	if err := locked(w, short.Err); KindOf(err) != TimeoutError || !strings.Contains(err.Error(), "deadline of 50ms") {
		t.Errorf("the short task: %v", err)
	}
	if at := timerAt(); at != 0 {
		t.Errorf("no member with a deadline runs, yet the timer is set for %d", at)
	}
}
