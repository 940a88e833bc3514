// Package lockorder gives a package's mutexes ranks and checks, in builds
// with the invariants tag or the race detector (every `make test` run),
// that each goroutine takes them in rank order: taking a lock of lower
// rank than one the goroutine holds panics, naming both. Locks of equal
// rank may nest (a parent Worker's lock, then its child's). Without the
// tag a Mutex is a sync.Mutex and the checks compile away.
//
// A rank may also say that its lock is never held across I/O (NoIO): the
// primitives that wait on another process or the kernel (creating,
// mapping and unlinking shared memory, a futex sleep, a request to a
// child process or a remote node) call IO, which panics in checked builds
// if the calling goroutine holds such a lock, naming both.
//
// A lock order written in a comment drifts; one that every test checks
// does not.
package lockorder

import "sync"

// Rank orders locks: a goroutine takes them in increasing rank.
type Rank struct {
	Order int
	Name  string
	NoIO  bool // never held across I/O (see IO)
}

// Mutex is a sync.Mutex with a rank. The zero value has rank 0 and is
// unchecked; set Rank before first use.
type Mutex struct {
	mu   sync.Mutex
	Rank Rank
}

// Lock takes m, after checking the order.
func (m *Mutex) Lock() {
	acquire(m, m.Rank)
	m.mu.Lock()
}

// Unlock releases m.
func (m *Mutex) Unlock() {
	release(m)
	m.mu.Unlock()
}

// RWMutex is a sync.RWMutex with a rank; readers are checked as writers
// are.
type RWMutex struct {
	mu   sync.RWMutex
	Rank Rank
}

func (m *RWMutex) Lock() {
	acquire(m, m.Rank)
	m.mu.Lock()
}

func (m *RWMutex) Unlock() {
	release(m)
	m.mu.Unlock()
}

func (m *RWMutex) RLock() {
	acquire(m, m.Rank)
	m.mu.RLock()
}

func (m *RWMutex) RUnlock() {
	release(m)
	m.mu.RUnlock()
}
