package shm

import (
	"sort"
	"sync"
)

// Every mapping a Segment makes is listed here, so that an address can be
// turned into the object it lies in and its offset there: the identity of
// a byte of shared memory that every process mapping the object agrees
// on, whatever address each mapped it at (the race detector keys memory
// by it). An object is known by its inode, which a rename (the pools of
// hal/comm) does not change.

type mapping struct {
	lo, hi uintptr
	ino    uint64
}

var mappings struct {
	sync.RWMutex
	list []mapping // sorted by lo, disjoint (the kernel never maps two at one address)
}

func (s *Segment) listMapping() {
	if len(s.Mem) == 0 {
		return
	}
	lo := uintptr(s.Addr())
	m := mapping{lo: lo, hi: lo + uintptr(len(s.Mem)), ino: s.ino}
	mappings.Lock()
	defer mappings.Unlock()
	i := sort.Search(len(mappings.list), func(i int) bool { return mappings.list[i].lo >= lo })
	mappings.list = append(mappings.list, mapping{})
	copy(mappings.list[i+1:], mappings.list[i:])
	mappings.list[i] = m
}

func (s *Segment) unlistMapping() {
	if len(s.Mem) == 0 {
		return
	}
	lo := uintptr(s.Addr())
	mappings.Lock()
	defer mappings.Unlock()
	i := sort.Search(len(mappings.list), func(i int) bool { return mappings.list[i].lo >= lo })
	if i < len(mappings.list) && mappings.list[i].lo == lo {
		mappings.list = append(mappings.list[:i], mappings.list[i+1:]...)
	}
}

// Identity is the object that the byte at addr of this process lies in
// (its inode) and the byte's offset in it; ok is false if addr is not in
// a shared-memory object this process maps.
func Identity(addr uintptr) (ino uint64, off uintptr, ok bool) {
	mappings.RLock()
	defer mappings.RUnlock()
	l := mappings.list
	i := sort.Search(len(l), func(i int) bool { return l[i].hi > addr })
	if i < len(l) && l[i].lo <= addr {
		return l[i].ino, addr - l[i].lo, true
	}
	return 0, 0, false
}
