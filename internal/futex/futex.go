// Package futex waits on and wakes 32-bit words in shared memory, across
// processes: the primitive under the process mailboxes and the
// communication windows.
//
// A waiter spins briefly, then sleeps in the kernel with the shared (not
// private) futex operations, which are keyed by the memory object and
// offset rather than a virtual address, so peers that map the object at
// other addresses still meet. Every sleep is bounded. SpinUntil spins
// for a set time first, for waits that are usually short: on a virtual
// machine, waking a thread that sleeps costs more than most such waits.
package futex

import (
	"fmt"
	"math"
	"runtime"
	"simpler/internal/lockorder"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	opWait = 0 // FUTEX_WAIT
	opWake = 1 // FUTEX_WAKE
)

const (
	// spinRounds and spinBusy bound the optimistic phase of a wait: a few
	// plain re-checks, then re-checks that yield the processor, before a
	// sleep in the kernel. A peer that answers quickly is seen without a
	// system call on either side.
	spinRounds = 64
	spinBusy   = 8
	// MaxSleep caps one sleep, bounding how late a store made without a
	// wake (a plain copy) is noticed.
	MaxSleep = 5 * time.Millisecond
)

// Word32 returns the uint32 at b[off:], which must be in range and 4-byte
// aligned. Callers lay out their words at aligned offsets of page-aligned
// mappings, so a failure is a bug.
func Word32(b []byte, off int) *uint32 {
	if off < 0 || off+4 > len(b) {
		panic(fmt.Sprintf("futex: word at %d outside %d bytes", off, len(b)))
	}
	p := unsafe.Pointer(&b[off])
	if uintptr(p)%4 != 0 {
		panic(fmt.Sprintf("futex: word at %p is not 4-byte aligned", p))
	}
	return (*uint32)(p)
}

// Word64 is Word32 for an 8-byte aligned uint64.
func Word64(b []byte, off int) *uint64 {
	if off < 0 || off+8 > len(b) {
		panic(fmt.Sprintf("futex: word at %d outside %d bytes", off, len(b)))
	}
	p := unsafe.Pointer(&b[off])
	if uintptr(p)%8 != 0 {
		panic(fmt.Sprintf("futex: word at %p is not 8-byte aligned", p))
	}
	return (*uint64)(p)
}

// Wait sleeps while *w == val, for at most d. Wake-ups, timeouts,
// interruptions and a value that already differs all return: callers
// re-check their condition.
func Wait(w *uint32, val uint32, d time.Duration) {
	lockorder.IO("a futex sleep")
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), opWait, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// Wake wakes every sleeper on w, in any process.
func Wake(w *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), opWake, math.MaxInt32, 0, 0, 0)
}

// Signal bumps w and wakes its sleepers, skipping the system call when
// sleepers (may be nil) says nobody sleeps.
func Signal(w *uint32, sleepers *uint32) {
	atomic.AddUint32(w, 1)
	if sleepers == nil || atomic.LoadUint32(sleepers) > 0 {
		Wake(w)
	}
}

// SleepUntil returns true once ready() holds, or false at deadline. w is
// the word whose change signals that ready() may have become true: whoever
// makes ready() true changes w afterwards and wakes it (Signal).
//
// No wake-up is lost: w is read before ready() is checked, and the kernel
// sleeps only while w still holds that value. sleepers, if not nil, counts
// this waiter while it may sleep; a waker reads it after changing w, and
// with sequentially consistent atomics on both sides either the waker sees
// the count or this waiter sees the change.
func SleepUntil(w *uint32, sleepers *uint32, deadline time.Time, ready func() bool) bool {
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
		Wait(w, seen, min(left, MaxSleep))
	}
}

// yieldEvery is how many spin rounds pass between yields of the thread
// to the operating system: a waiter in one process must not keep the
// peer it waits for, in another process, off the processor.
const yieldEvery = 8

// SpinUntil is SleepUntil with a spin of up to spin first: it re-checks
// ready, yielding the processor between checks (runtime.Gosched, so that
// the goroutine it waits for in this process runs; and every few rounds
// the thread itself, so that a peer process on this processor does),
// and sleeps in the kernel only once spin has passed. It allocates
// nothing. A peer that arrives within the spin is seen without a wake-up
// on either side: waking a sleeping thread costs 50-100 µs on the
// virtual machines this runs on, more than a collective's barrier takes.
func SpinUntil(w *uint32, sleepers *uint32, deadline time.Time, spin time.Duration, ready func() bool) bool {
	if ready() {
		return true
	}
	start := time.Now()
	end := start.Add(min(spin, time.Until(deadline)))
	for i := 1; ; i++ {
		if ready() {
			return true
		}
		if i%yieldEvery == 0 {
			if time.Now().After(end) {
				break
			}
			unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		} else {
			runtime.Gosched()
		}
	}
	return SleepUntil(w, sleepers, deadline, ready)
}
