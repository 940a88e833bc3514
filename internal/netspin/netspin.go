// Package netspin reads a TCP connection by polling it for a while before
// blocking in the runtime's network poller.
//
// Waking a process that sleeps in the kernel can cost many times a
// loopback round trip (on virtual machines an idle CPU's wake-up goes
// through the hypervisor: measured here at 50-100 µs against a 6-10 µs
// round trip). A reader that polls with non-blocking reads when the answer
// comes within its spin sees it at once, the way the process mailboxes
// spin on their futex before they sleep.
//
// The spin adapts: a spin that sees data doubles the next one (up to the
// maximum), one that times out halves it (down to a sixteenth), so a busy
// connection keeps polling and a quiet one soon costs next to nothing. And
// at most half the machine's processors spin at once: a process with many
// connections, a parent of many remote nodes say, keeps the rest for its
// work, and a reader that finds the spinners busy blocks at once. A
// reader gives its place up when it blocks. On one processor nothing
// spins (the peer could not run meanwhile).
package netspin

import (
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultSpin is the longest a Read polls before it blocks: longer than
// the gap between two requests of a busy parent (its own work between
// them), short enough that it is small against anything a human waits on.
const DefaultSpin = time.Millisecond

// spinning counts the readers spinning now; maxSpinners bounds it.
var (
	spinning    atomic.Int32
	maxSpinners = int32(runtime.NumCPU() / 2)
)

// Reader reads conn, spinning before each blocking read. It is used by
// one goroutine at a time.
type Reader struct {
	conn     net.Conn
	raw      syscall.RawConn // nil: conn cannot be polled; reads just block
	max, min time.Duration
	spin     time.Duration // the next spin
}

// NewReader reads conn with spin-then-block reads of at most spin; a
// connection that is not a TCP connection (a pipe in tests, say) is read
// plainly.
func NewReader(conn net.Conn, spin time.Duration) *Reader {
	r := &Reader{conn: conn, max: spin, min: spin / 16, spin: spin}
	if tc, ok := conn.(*net.TCPConn); ok && spin > 0 {
		r.raw, _ = tc.SyscallConn()
	}
	return r
}

// Read reads what has arrived, polling up to the current spin for
// something to arrive before it blocks (with the connection's deadline).
func (r *Reader) Read(p []byte) (int, error) {
	if r.raw == nil || len(p) == 0 {
		return r.conn.Read(p)
	}
	if !acquire() {
		return r.conn.Read(p)
	}
	n, ok, err := r.poll(p)
	spinning.Add(-1) // before blocking: a blocked reader is not spinning
	if ok {
		return n, err
	}
	return r.conn.Read(p)
}

// poll reads p without blocking until something arrives, the connection
// fails, or the spin times out (ok false: the caller blocks).
func (r *Reader) poll(p []byte) (n int, ok bool, err error) {
	start := time.Now()
	for {
		var rerr error
		err := r.raw.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), p)
			return true // never wait for readiness here
		})
		switch {
		case err != nil: // closed
			return 0, true, err
		case n > 0:
			r.spin = min(2*r.spin, r.max)
			return n, true, nil
		case rerr == nil: // n == 0: the peer closed its end
			return 0, true, io.EOF
		case !errors.Is(rerr, unix.EAGAIN) && !errors.Is(rerr, unix.EINTR):
			return 0, true, rerr
		}
		if time.Since(start) >= r.spin {
			r.spin = max(r.spin/2, r.min)
			return 0, false, nil
		}
		runtime.Gosched() // what the spin waits for may be a goroutine here
	}
}

// acquire takes a spinner's place if one is free; the caller gives it
// back with spinning.Add(-1).
func acquire() bool {
	if spinning.Add(1) > maxSpinners {
		spinning.Add(-1)
		return false
	}
	return true
}
