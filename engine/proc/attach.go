package proc

import (
	"fmt"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/hal/shm"
)

// maxMappings bounds the parent's objects a child keeps mapped while
// nothing uses them. Past it the least recently used go; a later
// reference maps its object again.
const maxMappings = 256

// mappings is a child's cache of the parent's host objects it has mapped
// (a task's host tensors, a copy's host side), so that an object used by
// every task is opened and mapped once, not per task.
//
// The parent reclaims an object by unlinking its name (hostmem.Space,
// HostBuffer, the heap ring), but the bytes stay while any process maps
// them: a child that kept every mapping would hold each reclaimed tensor
// for good. So when a reference misses the cache (about to map something
// new), the cache first drops every mapping not in use whose object has
// no name any more: the parent reclaimed it, and no later request can
// name it. Past maxMappings, mappings not in use go oldest use first.
// A mapping in use (uses > 0: a running task's tensor, a copy under way)
// is never dropped.
//
// It is a plain data structure guarded by its child's mutex; tests step
// it directly. named reports whether a mapping's object still has its
// name: one stat per mapping not in use, not a listing of /dev/shm (which
// holds every process's objects: thousands in a pod).
type mappings struct {
	byName map[string]*mapping
	clock  uint64 // counts acquires: a mapping's last use, for eviction
	limit  int
	named  func(*shm.Segment) bool
}

// mapping is one parent's object mapped here.
type mapping struct {
	seg  *shm.Segment
	uses int    // requests using it now
	last uint64 // clock at its last acquire
}

func newMappings() *mappings {
	return &mappings{byName: map[string]*mapping{}, limit: maxMappings, named: (*shm.Segment).Named}
}

// acquire maps ref's object (once) and counts one more use of it, which
// release gives back. A later reference to the same object must give the
// same size: an offset is checked against the size its reference gives,
// so a reference claiming more than is mapped would reach past the
// mapping.
func (ms *mappings) acquire(ref hostRef) (*mapping, error) {
	ms.clock++
	if m := ms.byName[ref.Name]; m != nil {
		if len(m.seg.Mem) != ref.Size {
			return nil, engine.Errorf(engine.ValueError, "host memory %s is mapped here with %d bytes, not %d", ref.Name, len(m.seg.Mem), ref.Size)
		}
		m.uses++
		m.last = ms.clock
		return m, nil
	}
	ms.dropReclaimed()
	ms.evict(ms.limit - 1)
	seg, err := shm.Open(ref.Name, ref.Size)
	if err != nil {
		return nil, engine.Wrap(err, fmt.Sprintf("mapping host memory %s", ref.Name))
	}
	hostmem.Register(seg)
	m := &mapping{seg: seg, uses: 1, last: ms.clock}
	ms.byName[ref.Name] = m
	return m, nil
}

// release gives back one use of each of held.
func (ms *mappings) release(held []*mapping) {
	for _, m := range held {
		m.uses--
	}
}

// dropReclaimed drops the mappings not in use whose object has lost its
// name.
func (ms *mappings) dropReclaimed() {
	for name, m := range ms.byName {
		if m.uses == 0 && !ms.named(m.seg) {
			ms.drop(name, m)
		}
	}
}

// evict drops mappings not in use, least recently used first, until at
// most keep remain or every one left is in use.
func (ms *mappings) evict(keep int) {
	for len(ms.byName) > keep {
		var oldest *mapping
		var name string
		for n, m := range ms.byName {
			if m.uses == 0 && (oldest == nil || m.last < oldest.last) {
				oldest, name = m, n
			}
		}
		if oldest == nil {
			return
		}
		ms.drop(name, oldest)
	}
}

// drop unregisters and unmaps one mapping (the child never owns the name).
func (ms *mappings) drop(name string, m *mapping) {
	delete(ms.byName, name)
	hostmem.Unregister(m.seg)
	m.seg.Close()
}

// closeAll drops every mapping, in use or not: the child is ending.
func (ms *mappings) closeAll() {
	for name, m := range ms.byName {
		ms.drop(name, m)
	}
}

// count is the number of objects mapped now.
func (ms *mappings) count() int { return len(ms.byName) }
