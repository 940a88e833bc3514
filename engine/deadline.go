package engine

import (
	"time"

	"simpler/engine/internal/core"
)

// A member's deadline is the core's (package core, deadline.go), in
// logical time: the Worker arms it in the core when the member starts
// (started), and advances the core when its one timer fires
// (deadlinesDue). The clock is the time since the Worker was made, or the
// schedule's virtual time under --seed, where the timer is a virtual one
// that fires at a scheduling point, the same point of every replay. Ticks
// are nanoseconds.

// deadlineTimer is a Worker's one timer for its members' deadlines, and
// the clock it counts on. Guarded by w.mu.
type deadlineTimer struct {
	det   *Det // under --seed: a virtual timer on the schedule's clock
	epoch time.Time
	timer *time.Timer
	at    int64  // the tick it is set for (0: none)
	fire  func() // driver.deadlinesDue
}

// now is the clock in the core's ticks.
func (d *deadlineTimer) now() int64 {
	if d.det != nil {
		return int64(d.det.S.Now())
	}
	return int64(time.Since(d.epoch))
}

// set makes the timer fire at tick at, or stops it (core.NoDeadline); 0
// leaves it as it is. A timer that fires all the same (it was on its way)
// finds nothing due.
func (d *deadlineTimer) set(at int64) {
	if at == 0 || at == d.at {
		return
	}
	d.at = at
	if d.det != nil {
		d.det.cancel(d)
	}
	if at == core.NoDeadline {
		d.at = 0
		if d.timer != nil {
			d.timer.Stop()
		}
		return
	}
	in := time.Duration(at - d.now())
	switch {
	case d.det != nil:
		d.det.after(d, in, d.fire)
	case d.timer == nil:
		d.timer = time.AfterFunc(in, d.fire)
	default:
		d.timer.Reset(in)
	}
}

// memberTimeout is how long each member of t may run, given the
// Worker's default (0: no limit).
func memberTimeout(t *Task, byDefault time.Duration) time.Duration {
	if t.cfg.Timeout != 0 {
		return t.cfg.Timeout
	}
	return byDefault
}

// lateError is the error of a member past its deadline of limit ticks.
func lateError(_ Assignment, limit int64) error {
	return Errorf(TimeoutError, "past its deadline of %v", time.Duration(limit))
}
