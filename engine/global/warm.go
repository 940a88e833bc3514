package global

import (
	"slices"
	"sync"

	"simpler/hal/comm"
	"simpler/wire"
)

// The broker's memory of warm global domains: for a domain that came up
// over pooled windows (every node pools: its chips are in its process),
// the names of those windows by rank, kept under the domain's members and
// window size. While no live domain uses them, the next domain over the
// same members and window size may take them back in one REATTACH phase
// (reattach.go, txn.go) instead of the full transaction. The entry is
// only a hint: a node checks that each window is still idle in its pool
// (and a peer's name still opens), and any miss makes the broker abort
// the phase, forget the entry and run the full transaction.

// warmMaxEntries bounds the entries a broker keeps (idle ones are
// forgotten oldest first; one in use is kept until its domain is freed).
const warmMaxEntries = 64

// warmEntry is one set of pooled windows, by rank.
type warmEntry struct {
	key     string
	handles []string
	busy    bool   // a live domain has these windows
	idleAt  uint64 // when it last became idle (the cache's clock)
}

// warmCache is a broker's entries, by key. Its zero value is empty.
type warmCache struct {
	mu      sync.Mutex
	entries map[string][]*warmEntry
	n       int
	clock   uint64
}

// warmKey is the key of a domain over members with windows of size
// bytes: what must be equal for its windows to serve another domain.
func warmKey(members [][2]int, size int) string {
	var e wire.Encoder
	e.U64(uint64(size))
	for _, m := range members {
		e.U32(uint32(m[0]))
		e.U32(uint32(m[1]))
	}
	return string(e.Bytes())
}

// take returns an idle entry for key, now busy, or nil.
func (c *warmCache) take(key string) *warmEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries[key] {
		if !e.busy {
			e.busy = true
			return e
		}
	}
	return nil
}

// add remembers the windows of a domain that just came up the full way,
// busy, if every one is pooled; it returns the entry, or nil.
func (c *warmCache) add(key string, table []comm.Descriptor) *warmEntry {
	e := &warmEntry{key: key, busy: true}
	for _, d := range table {
		if !comm.PooledName(d.Handle) {
			return nil
		}
		e.handles = append(e.handles, d.Handle)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string][]*warmEntry{}
	}
	c.entries[key] = append(c.entries[key], e)
	c.n++
	for c.n > warmMaxEntries && c.evictOldest() {
	}
	return e
}

// evictOldest forgets the idle entry idle longest; false if none is idle.
// Caller holds c.mu.
func (c *warmCache) evictOldest() bool {
	var oldest *warmEntry
	for _, es := range c.entries {
		for _, e := range es {
			if !e.busy && (oldest == nil || e.idleAt < oldest.idleAt) {
				oldest = e
			}
		}
	}
	if oldest == nil {
		return false
	}
	c.forget(oldest)
	return true
}

// idle makes e available again: its domain was freed on every node.
func (c *warmCache) idle(e *warmEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clock++
	e.busy, e.idleAt = false, c.clock
}

// drop forgets e: its windows are stale, or its domain's free failed.
func (c *warmCache) drop(e *warmEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forget(e)
}

// forget removes e if it is still there. Caller holds c.mu.
func (c *warmCache) forget(e *warmEntry) {
	es := c.entries[e.key]
	if i := slices.Index(es, e); i >= 0 {
		c.entries[e.key] = slices.Delete(es, i, i+1)
		if len(c.entries[e.key]) == 0 {
			delete(c.entries, e.key)
		}
		c.n--
	}
}

// table is e's windows as the descriptor table of generation gen of
// domain id with window size bytes: what REATTACH carries. Every rank gets
// a fresh secret, drawn here: each node seals its own windows with the
// table's, so no secret of an earlier domain opens them (hal/comm:
// GlobalRequest.ReuseSecret).
func (e *warmEntry) table(id, gen uint64, size int) []comm.Descriptor {
	t := make([]comm.Descriptor, len(e.handles))
	for r, h := range e.handles {
		t[r] = comm.Descriptor{Profile: comm.ProfileSim, DomainID: id, Generation: gen, Rank: uint32(r),
			Ranks: uint32(len(e.handles)), MappingSize: uint64(size), Handle: h, Secret: comm.NewSecret()}
	}
	return t
}
