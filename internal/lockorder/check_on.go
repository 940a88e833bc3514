//go:build invariants || race

package lockorder

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"sync"
)

// Enabled reports whether the order is checked in this build.
const Enabled = true

type heldLock struct {
	lock any
	rank Rank
}

// held is what each goroutine holds, by goroutine id.
var held struct {
	sync.Mutex
	by map[uint64][]heldLock
}

// goid is the calling goroutine's id, from its stack header
// ("goroutine 17 [running]:"): slow, and only in checked builds.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}

func acquire(lock any, r Rank) {
	if r.Order == 0 {
		return
	}
	id := goid()
	held.Lock()
	defer held.Unlock()
	if held.by == nil {
		held.by = map[uint64][]heldLock{}
	}
	for _, h := range held.by[id] {
		if h.rank.Order > r.Order {
			panic(fmt.Sprintf("lock order: %s (rank %d) taken while holding %s (rank %d)", r.Name, r.Order, h.rank.Name, h.rank.Order))
		}
		if h.lock == lock {
			panic(fmt.Sprintf("lock order: %s taken twice by one goroutine", r.Name))
		}
	}
	held.by[id] = append(held.by[id], heldLock{lock, r})
}

// release forgets lock for the goroutine that holds it. A lock may be
// released by another goroutine than the one that took it (sync allows
// it): then the holder is searched for.
func release(lock any) {
	held.Lock()
	defer held.Unlock()
	id := goid()
	if drop(id, lock) {
		return
	}
	for other := range held.by {
		if drop(other, lock) {
			return
		}
	}
}

// drop removes lock from goroutine id's list; caller holds held.
func drop(id uint64, lock any) bool {
	list := held.by[id]
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].lock == lock {
			list = append(list[:i], list[i+1:]...)
			if len(list) == 0 {
				delete(held.by, id)
			} else {
				held.by[id] = list
			}
			return true
		}
	}
	return false
}

// IO records that the calling goroutine is about to do what: it panics if
// the goroutine holds a lock whose rank is NoIO.
func IO(what string) {
	id := goid()
	held.Lock()
	defer held.Unlock()
	for _, h := range held.by[id] {
		if h.rank.NoIO {
			panic(fmt.Sprintf("lock order: %s while holding %s, which is never held across I/O", what, h.rank.Name))
		}
	}
}
