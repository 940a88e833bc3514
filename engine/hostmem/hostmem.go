// Package hostmem keeps host tensors in POSIX shared memory, so that a child
// process can map the same bytes, and resolves host addresses back to them.
//
// A host address is the real virtual address of the parent's mapping
// (Segment.Addr()+offset). Every live segment — those a Space allocates and
// those registered from elsewhere — is in one process-wide registry, so
// Resolve can check and translate any address on the dispatch path.
package hostmem

import (
	"sort"
	"sync"

	"simpler/hal/shm"
	"simpler/kind"
)

type entry struct {
	start, end uint64
	seg        *shm.Segment
}

// registry is sorted by start. Live mappings never overlap, so the entry
// that could hold an address is the last one starting at or below it.
var registry struct {
	sync.RWMutex
	entries []entry
}

// Register makes seg's bytes resolvable. Registering it again is a no-op.
func Register(seg *shm.Segment) {
	if len(seg.Mem) == 0 {
		return
	}
	e := entry{seg.Addr(), seg.Addr() + uint64(len(seg.Mem)), seg}
	registry.Lock()
	defer registry.Unlock()
	es := registry.entries
	i := sort.Search(len(es), func(i int) bool { return es[i].end > e.start })
	j := i
	for j < len(es) && es[j].start < e.end {
		if es[j].seg == seg {
			return
		}
		j++
	}
	// Live mappings cannot overlap, so entries in [i, j) belong to segments
	// unmapped without Unregister; the new mapping replaces them.
	registry.entries = append(es[:i], append([]entry{e}, es[j:]...)...)
}

// Unregister removes seg; call it before unmapping seg, since the address
// range may be reused by the next mapping.
func Unregister(seg *shm.Segment) {
	if len(seg.Mem) == 0 {
		return
	}
	start := seg.Addr()
	registry.Lock()
	defer registry.Unlock()
	es := registry.entries
	i := sort.Search(len(es), func(i int) bool { return es[i].start >= start })
	if i < len(es) && es[i].seg == seg {
		registry.entries = append(es[:i], es[i+1:]...)
	}
}

// lookup returns the entry whose range contains addr.
func lookup(addr uint64) (entry, bool) {
	registry.RLock()
	defer registry.RUnlock()
	es := registry.entries
	i := sort.Search(len(es), func(i int) bool { return es[i].start > addr }) - 1
	if i >= 0 && addr < es[i].end {
		return es[i], true
	}
	return entry{}, false
}

// Locate finds the registered segment holding addr and the offset in it.
func Locate(addr uint64) (seg *shm.Segment, off int, ok bool) {
	e, ok := lookup(addr)
	if !ok {
		return nil, 0, false
	}
	return e.seg, int(addr - e.start), true
}

// Resolve returns the bytes [addr, addr+size) if they lie inside one live
// registered segment.
func Resolve(addr uint64, size int) ([]byte, error) {
	if size < 0 {
		return nil, kind.Errorf(kind.ValueError, "host address %#x: size must be >= 0, got %d", addr, size)
	}
	e, ok := lookup(addr)
	if !ok {
		return nil, kind.Errorf(kind.ValueError, "host address %#x (%d bytes) is not in shared memory", addr, size)
	}
	off := addr - e.start
	if uint64(size) > e.end-addr {
		return nil, kind.Errorf(kind.ValueError, "host address %#x (%d bytes) overruns the shared buffer at %#x of %d bytes",
			addr, size, e.start, e.end-e.start)
	}
	return e.seg.Mem[off : off+uint64(size) : off+uint64(size)], nil
}
