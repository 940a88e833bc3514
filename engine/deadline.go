package engine

import (
	"time"

	"simpler/engine/internal/core"
)

// A member's deadline is the core's (package core, deadline.go), in
// logical time: the Worker tells the core when a member starts with a
// timeout (armMember), and advances it when its one timer fires
// (deadlinesDue). The clock is the time since the Worker was made, or the
// schedule's virtual time under --seed, where the timer is a virtual one
// that fires at a scheduling point, the same point of every replay. Ticks
// are nanoseconds.

// timeoutOf is how long each member of t may run (0: no limit).
func (w *Worker) timeoutOf(t *Task) time.Duration {
	if t.cfg.Timeout != 0 {
		return t.cfg.Timeout
	}
	return w.cfg.TaskTimeout
}

// tick is w's clock in the core's ticks.
func (w *Worker) tick() int64 {
	if d := w.cfg.Det; d != nil {
		return int64(d.S.Now())
	}
	return int64(time.Since(w.epoch))
}

// lateError is the error of a member past its deadline of limit ticks.
func lateError(_ Assignment, limit int64) error {
	return Errorf(TimeoutError, "past its deadline of %v", time.Duration(limit))
}

// armMember gives running member a its deadline, d from now.
func (w *Worker) armMember(a Assignment, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var eff Effects
	w.core.Arm(a, w.tick()+int64(d), int64(d), &eff)
	w.setTimer(eff.Deadline)
}

// setTimer makes w's one timer fire at tick at, or stops it
// (core.NoDeadline); 0 leaves it as it is. A timer that fires all the
// same (it was on its way) finds nothing due. Caller holds w.mu.
func (w *Worker) setTimer(at int64) {
	if at == 0 || at == w.timerAt {
		return
	}
	w.timerAt = at
	d := w.cfg.Det
	if d != nil {
		d.cancel(w)
	}
	if at == core.NoDeadline {
		w.timerAt = 0
		if w.timer != nil {
			w.timer.Stop()
		}
		return
	}
	in := time.Duration(at - w.tick())
	if d != nil {
		d.after(w, in, w.deadlinesDue)
		return
	}
	if w.timer == nil {
		w.timer = time.AfterFunc(in, w.deadlinesDue)
		return
	}
	w.timer.Reset(in)
}

// deadlinesDue advances the core to now: the members past their deadline
// fail, poisoning what depends on them, and their endpoints are asked to
// stop them, each with its own deadline as the reason; then the timer is
// set for the next deadline.
func (w *Worker) deadlinesDue() {
	w.mu.Lock()
	w.timerAt = 0
	var eff Effects
	w.core.Advance(w.tick(), &eff)
	w.setTimer(eff.Deadline)
	w.wake(eff)
	w.mu.Unlock()
	for i, a := range eff.Stop {
		limit := w.timeoutOf(taskOf(a.Task))
		w.stopMembers(eff.Stop[i:i+1], lateError(a, int64(limit)).Error())
	}
	eff.Stop = nil
	w.apply(eff, "")
}
