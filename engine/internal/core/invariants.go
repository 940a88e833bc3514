package core

import "fmt"

// checkInvariants verifies what every step must leave true; it runs only
// when the invariants constant is on (invariants_on.go). It is the
// expensive cross-check that keeps the bookkeeping of the runs, the
// scheduler and the engine's own state (Config.Check) from drifting apart
// unnoticed.
func (c *Core) checkInvariants() {
	fail := func(format string, args ...any) {
		panic(fmt.Sprintf("core invariant broken: "+format, args...))
	}
	total := 0
	for i, r := range c.order {
		if r.inflight < 0 {
			fail("run %d has %d tasks in flight", r.id, r.inflight)
		}
		total += r.inflight
		if i == 0 && len(r.held) > 0 {
			fail("run %d is first but holds %d ready tasks", r.id, len(r.held))
		}
		for _, t := range r.held {
			if t.done || t.pending != 0 {
				fail("run %d holds task %d (done %v, %d producers pending)", r.id, t.id, t.done, t.pending)
			}
		}
	}
	if total != c.inflight {
		fail("%d tasks in flight, the runs count %d", c.inflight, total)
	}
	c.sched.checkInvariants(fail)
	if c.cfg.Check != nil {
		c.cfg.Check(fail)
	}
}

func (s *Sched) checkInvariants(fail func(string, ...any)) {
	for w, n := range s.nextLoad {
		if n < 0 || n > s.depth[w] {
			fail("NEXT_LEVEL worker %d holds %d tasks, its depth is %d", w, n, s.depth[w])
		}
	}
	idle := 0
	for _, busy := range s.subBusy {
		if !busy {
			idle++
		}
	}
	if idle != s.subIdle {
		fail("%d SUB workers idle, the count says %d", idle, s.subIdle)
	}
}
