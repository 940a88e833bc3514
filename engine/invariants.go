package engine

// checkInvariants verifies that every heap ring's blocks add up to what
// it counts as used; the core calls it after each step when its
// invariants are checked (the invariants build tag, on under -race).
// Caller holds w.mu.
func (h *runHeap) checkInvariants(fail func(string, ...any)) {
	for _, r := range h.rings {
		r.checkInvariants(fail)
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
