package engine

import (
	"strconv"
	"strings"
	"sync"

	"simpler/hal/comm"
	"simpler/hal/shm"
)

// Warm slots: a task_only domain (what a collective call allocates) over
// the same members and window size as one freed before takes back that
// domain's ranks, parked by hal/comm when they were released, instead of
// meeting at the allocation barrier again. The contract of a fresh
// allocation stays: a fresh allocation id and a zero window (hal/comm's
// warm.go clears it and rewrites the CommContext).
//
// The Worker decides for all ranks at once whether an allocation is fresh
// or takes a slot back, because only it knows that every rank of the
// slot's last domain was released: a slot is idle (parked) only after a
// free that succeeded. A rank that cannot take its part back (its child
// process was restarted, the pool was drained, it was not parked because
// a kernel left the header unclean) fails at once; the allocation then
// releases the ranks that did take theirs back and allocates afresh in
// the same slot under a new generation, which tears the stale parts down.
//
// Process mode works the same way: each rank parks in its chip's process,
// which tears its parked ranks down when it shuts down.

// warmKey is the shape a slot serves.
type warmKey struct {
	members string // the member chips in rank order, "0,1,2"
	winSize int
}

// warmSlot is one slot of a Worker's namespace.
type warmSlot struct {
	id  int
	gen uint64 // the generation of its last fresh allocation
	key warmKey
}

// warmSlots are a Worker's slots (its LocalDomains'); mu is a leaf lock.
type warmSlots struct {
	mu   sync.Mutex
	next int                     // the next slot id
	idle map[warmKey][]*warmSlot // slots whose last domain was freed, parked
}

func keyOf(spec *DomainSpec) warmKey {
	var b strings.Builder
	for i, id := range spec.Workers {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(id))
	}
	return warmKey{members: b.String(), winSize: spec.WindowSize}
}

// take returns a parked slot of key (reuse) or a new slot.
func (s *warmSlots) take(key warmKey) (slot *warmSlot, reuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.idle[key]; len(q) > 0 {
		slot = q[len(q)-1]
		s.idle[key] = q[:len(q)-1]
		return slot, true
	}
	s.next++
	return &warmSlot{id: s.next, gen: 1, key: key}, false
}

// put makes slot idle again: its domain was freed and its ranks parked.
func (s *warmSlots) put(slot *warmSlot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle == nil {
		s.idle = map[warmKey][]*warmSlot{}
	}
	s.idle[slot.key] = append(s.idle[slot.key], slot)
}

// forget drops every idle slot (the Worker closes, or its parked ranks
// were torn down): later allocations start new slots.
func (s *warmSlots) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idle = nil
}

// idleCount reports the idle slots (for tests).
func (s *warmSlots) idleCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.idle {
		n += len(q)
	}
	return n
}

// allocateWarm allocates d's ranks in a warm slot: taken back when one is
// parked, else fresh (with the ranks parking at release). A failed
// take-back releases what was taken and allocates the slot afresh under
// its next generation.
func (ld *LocalDomains) allocateWarm(d *Domain, req comm.Request) error {
	slot, reuse := ld.warm.take(keyOf(&d.spec))
	if reuse {
		req.Namespace = comm.WarmNamespace(ld.w.namespace, slot.id, slot.gen, true)
		if err := ld.runRanks(d, req, true); err == nil {
			d.slot = slot
			return nil
		}
		slot.gen++
	}
	req.Namespace = comm.WarmNamespace(ld.w.namespace, slot.id, slot.gen, false)
	if err := ld.runRanks(d, req, false); err != nil {
		return err
	}
	d.slot = slot
	return nil
}

// dropWarm tears down the ranks this Worker parked in its own process,
// before its chips close (parked ranks are mapped in them).
func (ld *LocalDomains) dropWarm() error {
	ld.warm.forget()
	if ld.commInits.Load() == 0 || !ld.w.tree.chipsHere {
		return nil // nothing allocated here; or each chip process drops its own
	}
	return comm.DropWarm(shm.Prefix(), ld.w.namespace)
}
