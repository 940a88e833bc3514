package comm

import (
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futex operations. The shared (non-private) variants are required: the
// words live in MAP_SHARED objects that other processes map at other
// addresses, and only a shared futex is keyed by the object and offset
// rather than by this process's virtual address.
const (
	futexWaitOp = 0 // FUTEX_WAIT
	futexWakeOp = 1 // FUTEX_WAKE
)

const (
	// spinRounds and spinBusy bound the optimistic phase of a wait: a
	// few plain re-checks, then re-checks that yield the processor, before
	// paying for a sleep in the kernel. Peers that are goroutines of this
	// process usually answer within that time.
	spinRounds = 64
	spinBusy   = 8
	// maxSleep caps one futex sleep. Every store made through this
	// package wakes sleepers, but a peer may also write a flag with a
	// plain copy; the cap bounds how late such a store is noticed.
	maxSleep = 5 * time.Millisecond
)

// word32 returns the uint32 at b[off:], which must be in range and
// 4-byte aligned in memory. Internal offsets satisfy this by construction
// (objects are page aligned), so a failure is a bug, not a user error.
func word32(b []byte, off int) *uint32 {
	if off < 0 || off+4 > len(b) {
		panic(fmt.Sprintf("comm: word at %d outside %d bytes", off, len(b)))
	}
	p := unsafe.Pointer(&b[off])
	if uintptr(p)%4 != 0 {
		panic(fmt.Sprintf("comm: word at %p is not 4-byte aligned", p))
	}
	return (*uint32)(p)
}

// word64 is word32 for an 8-byte aligned uint64.
func word64(b []byte, off int) *uint64 {
	if off < 0 || off+8 > len(b) {
		panic(fmt.Sprintf("comm: word at %d outside %d bytes", off, len(b)))
	}
	p := unsafe.Pointer(&b[off])
	if uintptr(p)%8 != 0 {
		panic(fmt.Sprintf("comm: word at %p is not 8-byte aligned", p))
	}
	return (*uint64)(p)
}

// futexWait sleeps while *w == val, for at most d. Wake-ups, timeouts,
// interruptions and a value that already differs all simply return: every
// caller re-checks its condition afterwards.
func futexWait(w *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every sleeper on w, in any process.
func futexWake(w *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakeOp, math.MaxInt32, 0, 0, 0)
}

// sleepUntil returns true once ready() holds, or false at deadline. w is
// the word whose change signals that ready() may have become true; every
// party that makes ready() true changes w afterwards and then wakes it.
//
// No wake-up is lost: w is read before ready() is checked, and the futex
// sleeps only if w still holds that value, so a change made after the
// check makes the sleep return at once.
//
// If sleepers is not nil it counts this waiter while it may be in the
// kernel, so that wakers can skip the system call when nobody sleeps; the
// waker reads it after changing w, and with sequentially consistent atomics
// on both sides either the waker sees the count or this waiter sees the
// change.
func sleepUntil(w *uint32, sleepers *uint32, deadline time.Time, ready func() bool) bool {
	for i := 0; i < spinRounds; i++ {
		if ready() {
			return true
		}
		if i >= spinBusy {
			runtime.Gosched()
		}
	}
	if sleepers != nil {
		atomic.AddUint32(sleepers, 1)
		defer atomic.AddUint32(sleepers, ^uint32(0))
	}
	for {
		seen := atomic.LoadUint32(w)
		if ready() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		futexWait(w, seen, min(left, maxSleep))
	}
}
