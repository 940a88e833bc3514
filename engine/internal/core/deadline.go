package core

import "errors"

// Deadlines in logical time. A member's deadline is kept on its entry
// among the running members, so it goes when the member is reported back
// and costs nothing to a task without one. The earliest deadline is
// found again (over the running members, a short list) only when a member
// with a deadline starts, comes back or expires.

// errLate is a late member's error when Config.Late is not set.
var errLate = errors.New("past its deadline")

// Arm gives running member a a deadline at tick `at`, limit ticks after
// it started; eff.Deadline says so if it is now the earliest. A member
// reported back already is left alone.
func (c *Core) Arm(a Assignment, at, limit int64, eff *Effects) {
	if invariants {
		defer c.checkInvariants()
	}
	m := c.find(a)
	if m == nil {
		return
	}
	m.deadline, m.limit = at, limit
	if next := c.nextDeadline(); next == at {
		eff.Deadline = at
	}
}

// Advance moves the core's time to now: every running member whose
// deadline is at or before now fails with its Late error, its task
// retires at once and its endpoint is asked to stop it (expire).
// eff.Deadline is the next deadline still to come, or NoDeadline.
func (c *Core) Advance(now int64, eff *Effects) {
	if invariants {
		defer c.checkInvariants()
	}
	for p := range c.active {
		for e := range c.active[p] {
			for i := 0; i < len(c.active[p][e]); i++ {
				m := c.active[p][e][i]
				if m.deadline == 0 || m.deadline > now || m.settled {
					continue
				}
				a := Assignment{Task: m.task, Member: m.index, Pool: Pool(p), Target: e}
				c.expire(a, c.late(a, m.limit), eff)
			}
		}
	}
	eff.Deadline = c.nextDeadline()
}

// late is the error of member a past its deadline of limit ticks.
func (c *Core) late(a Assignment, limit int64) error {
	if c.cfg.Late == nil {
		return errLate
	}
	return c.cfg.Late(a, limit)
}
