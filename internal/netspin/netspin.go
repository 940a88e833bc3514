// Package netspin reads a TCP connection by polling it for a short while
// before blocking in the runtime's network poller.
//
// Waking a process that sleeps in the kernel can cost several times a
// loopback round trip (on virtual machines an idle CPU's wake-up goes
// through the hypervisor). A reader that expects an answer soon, such as
// the completion of a task it just sent, polls with non-blocking reads for
// a bounded time first, the way the process mailboxes spin on their futex
// before they sleep. The spin is bounded per Read, so a connection that
// stays quiet costs one spin and then nothing.
package netspin

import (
	"errors"
	"io"
	"net"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultSpin is how long a Read polls before it blocks: longer than the
// few tens of microseconds a peer takes to answer a small request, short
// enough that an idle connection costs nothing that matters.
const DefaultSpin = 100 * time.Microsecond

// Reader reads conn, spinning before each blocking read.
type Reader struct {
	conn net.Conn
	raw  syscall.RawConn // nil: conn cannot be polled; reads just block
	spin time.Duration
}

// NewReader reads conn with spin-then-block reads; a connection that is
// not a TCP connection (a pipe in tests, say) is read plainly.
func NewReader(conn net.Conn, spin time.Duration) *Reader {
	r := &Reader{conn: conn, spin: spin}
	if tc, ok := conn.(*net.TCPConn); ok && spin > 0 {
		r.raw, _ = tc.SyscallConn()
	}
	return r
}

// Read reads what has arrived, polling up to the spin time for something
// to arrive before it blocks (with the connection's deadline).
func (r *Reader) Read(p []byte) (int, error) {
	if r.raw == nil || len(p) == 0 {
		return r.conn.Read(p)
	}
	start := time.Now()
	for {
		var n int
		var rerr error
		err := r.raw.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), p)
			return true // never wait for readiness here
		})
		switch {
		case err != nil: // closed
			return 0, err
		case n > 0:
			return n, nil
		case rerr == nil: // n == 0: the peer closed its end
			return 0, io.EOF
		case !errors.Is(rerr, unix.EAGAIN) && !errors.Is(rerr, unix.EINTR):
			return 0, rerr
		}
		if time.Since(start) >= r.spin {
			return r.conn.Read(p)
		}
		runtime.Gosched() // what the spin waits for may be a goroutine here

	}
}
