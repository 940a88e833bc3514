package engine

import "fmt"

// checkInvariants verifies what every core step must leave true; it runs
// only when the invariants constant is on (invariants_on.go). It is the
// expensive cross-check that keeps the bookkeeping of the core, the
// scheduler and the heap from drifting apart unnoticed.
func (c *core) checkInvariants() {
	fail := func(format string, args ...any) {
		panic(fmt.Sprintf("engine invariant broken: "+format, args...))
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
				fail("run %d holds task %d (done %v, %d producers pending)", r.id, t.ID, t.done, t.pending)
			}
		}
	}
	if total != c.inflight {
		fail("%d tasks in flight, the runs count %d", c.inflight, total)
	}
	c.sched.checkInvariants(fail)
	if c.heap != nil {
		for _, r := range c.heap.rings {
			r.checkInvariants(fail)
		}
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

func (h *heapRing) checkInvariants(fail func(string, ...any)) {
	used := 0
	for i, b := range h.blocks {
		if b.refs < 0 || b.ring != h {
			fail("heap ring %d: block at %d has %d references (ring %p, want %p)", h.index, b.off, b.refs, b.ring, h)
		}
		if i > 0 && b.off < h.blocks[i-1].off && b.off+b.size > h.blocks[i-1].off {
			fail("heap blocks at %d and %d overlap", h.blocks[i-1].off, b.off)
		}
		if !b.freed { // a freed block stays listed until everything older is freed
			used += b.size
		}
	}
	if used != h.used || h.used > h.size {
		fail("the heap counts %d bytes used of %d; its blocks hold %d", h.used, h.size, used)
	}
}
