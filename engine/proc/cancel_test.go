package proc

import (
	"errors"
	"slices"
	"testing"
	"time"

	"simpler/engine"
)

// Cancels racing short tasks in child processes, at once after the
// submit: each task is reported as it ended, and one reported not started
// or stopped did not write (add1 heeds no stop, so it runs whole or not at
// all); one that ran is never reported as cancelled. Bounded in count and
// time.
func TestRunCancelRacingShortTasks(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, engine.Config{})
	register(t, w, procKernel{"add1"})
	x, xb := hostI64(t, sp, 1)
	y, yb := hostI64(t, sp, 1)
	bufs := [][]byte{xb, yb}
	outcomes := map[string]int{}
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; i < 100 && time.Now().Before(deadline); i++ {
		before := []int64{get64(xb), get64(yb)}
		r, err := w.Submit(asBuild(func(o *engine.Orchestrator) error {
			if _, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, engine.InOut), nil, 0); err != nil {
				return err
			}
			_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(y, engine.InOut), nil, 1)
			return err
		}))
		if err != nil {
			t.Fatal(err)
		}
		r.Cancel()
		err = r.Wait(5 * time.Second)
		var rep *engine.CancelReport
		if err != nil && !errors.As(err, &rep) {
			t.Fatalf("cancel %d: %v", i, err)
		}
		for k, b := range bufs {
			what, want := "ran", before[k]+1
			if rep != nil && (slices.Contains(rep.NotStarted, k+1) || slices.Contains(rep.Stopped, k+1)) {
				what, want = "cancelled", before[k]
			}
			outcomes[what]++
			if get64(b) != want {
				t.Fatalf("cancel %d: task %d reported %s, its tensor went %d -> %d (%v)", i, k+1, what, before[k], get64(b), err)
			}
		}
	}
	t.Logf("outcomes: %v", outcomes)
}
