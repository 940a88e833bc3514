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
// The spin adapts: the next spin lasts four times as long as the last
// answer took (between a quarter of the maximum and the maximum), and
// an answer that took longer than the maximum halves it, so a busy
// connection keeps polling, a quiet one soon spins only a quarter of the
// maximum per read, and a spin whose answer is late gives the processor
// up soon after. And
// at most half the machine's processors spin at once: a process with many
// connections, a parent of many remote nodes say, keeps the rest for its
// work, and a reader that finds the spinners busy blocks at once. A
// reader gives its place up when it blocks. On one processor nothing
// spins (the peer could not run meanwhile).
//
// A spin only pays while a processor is free for it. When the machine has
// more runnable threads than processors, a spinner takes the processor its
// peer (the other end of a loopback session, or a worker thread of its own
// process) needs to produce what the spinner waits for, and both ends of
// a session, each spinning, can starve each other for a scheduler slice
// at a time: milliseconds, against microseconds. So a spinner watches for
// that: if a thread of this process is switched out involuntarily while it
// spins (the process's involuntary context switches, getrusage), a core
// is shared, and the spin ends at once; for a while after (the hold: 1
// ms, doubling while it keeps happening, up to 100 ms) each read spins at
// most 50 µs before it blocks. And the client's end of a session need not
// spin while nothing it asked for is due (SpinWhileDue): then the
// processor is left to the work that makes the next request and to the
// server's end, which spins for that request. The decisions are the
// policy type's, a state machine stepped by outcomes, which the tests
// drive directly.
package netspin

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultSpin is the longest a Read polls before it blocks: longer than
// the gap between two requests of a busy parent (its own work between
// them, a global domain's commands say), short enough that it is small
// against anything a human waits on. (Half a millisecond gave the remote
// no-op a slightly lower p99, but a global domain's allocate and release
// took three times as long: the session's spin for the parent's next
// command ran out.)
const DefaultSpin = time.Millisecond

// spinning counts the readers spinning now; maxSpinners bounds it.
var (
	spinning    atomic.Int32
	maxSpinners = int32(runtime.NumCPU() / 2)
)

// Hold bounds: how long a reader that saw its core shared spins at most
// holdSpin before it blocks, first and at most. holdSpin covers the usual
// answer of a loopback session (25 µs here): a hold that blocked at once
// made every read in it pay a wake-up, and the remote no-op's slow runs
// came in runs of 20 (more than 150 µs: 11-43 of 401 runs, against 4-14
// with holdSpin).
const (
	holdMin  = time.Millisecond
	holdMax  = 100 * time.Millisecond
	holdSpin = 50 * time.Microsecond
)

// checkEvery is how many polls pass between two looks at the involuntary
// context switches (a system call each).
const checkEvery = 8

// outcome is how a spin ended.
type outcome int

const (
	gotData   outcome = iota // something arrived, or the connection ended
	timedOut                 // the spin ran out: the reader blocks
	preempted                // the spinning thread was switched out: the reader blocks
)

// policy decides each spin's length from how the earlier ones ended. It
// is used by one goroutine at a time (its Reader's).
type policy struct {
	max, min   time.Duration
	spin       time.Duration // the next spin, once quiet is over
	hold       time.Duration // the next hold, after a preempted spin
	quietUntil time.Time     // spins of at most holdSpin before this
}

func newPolicy(max time.Duration) policy {
	// A quarter of the maximum at least: with a sixteenth, a dialled-in
	// rank's no-op took 84 µs at the median against 44 (6 interleaved
	// runs each), while the remote p99 held in 5 of 6 runs either way.
	return policy{max: max, min: max / 4, spin: max, hold: holdMin}
}

// budget is how long a read at now may spin; 0: block at once.
func (p *policy) budget(now time.Time) time.Duration {
	if now.Before(p.quietUntil) {
		return min(p.spin, holdSpin)
	}
	return p.spin
}

// reach is how many times the last answer's wait the next spin lasts: a
// spin that outlasts the usual answer many times over only burns what a
// late answer's producer may need (see the package comment).
const reach = 4

// ended steps the policy by how a spin that ended at now went; waited is
// how long the answer took from the spin's start (counting the blocking
// read after a spin that timed out).
func (p *policy) ended(o outcome, waited time.Duration, now time.Time) {
	switch o {
	case gotData, timedOut:
		if waited <= p.max { // within reach of a spin: spin a few times that
			p.spin = min(max(reach*waited, p.min), p.max)
		} else { // quiet: spin less and less
			p.spin = max(p.spin/2, p.min)
		}
		if o == gotData {
			p.hold = holdMin
		}
	case preempted:
		p.spin = max(p.spin/2, p.min)
		p.quietUntil = now.Add(p.hold)
		p.hold = min(2*p.hold, holdMax)
	}
}

// Reader reads conn, spinning before each blocking read. It is used by
// one goroutine at a time.
type Reader struct {
	conn     net.Conn
	raw      syscall.RawConn // nil: conn cannot be polled; reads just block
	pol      policy
	switches func() int64 // involuntarySwitches; tests fake it

	due    func() bool // nil: always spin; else spin only while it says an answer is due
	parked atomic.Bool // a read with nothing due is blocking, or about to
}

// NewReader reads conn with spin-then-block reads of at most spin; a
// connection that is not a TCP connection (a pipe in tests, say) is read
// plainly.
func NewReader(conn net.Conn, spin time.Duration) *Reader {
	r := &Reader{conn: conn, pol: newPolicy(spin), switches: involuntarySwitches}
	if tc, ok := conn.(*net.TCPConn); ok && spin > 0 {
		r.raw, _ = tc.SyscallConn()
	}
	return r
}

// SpinWhileDue makes r spin only while due reports that an answer is due:
// the client's end of a session, which hears only answers to what it
// sent. With nothing due a read blocks at once, leaving the processor to
// the work that will send the next request (and to the peer spinning for
// it), and Due wakes it to spin for the answer once that request is sent.
// r then owns the connection's read deadline: Due sets it in the past.
func (r *Reader) SpinWhileDue(due func() bool) { r.due = due }

// Due tells a reader with SpinWhileDue that an answer is now due: called
// after the request is recorded where due sees it (and sent). A read
// blocked with nothing due ends, and the reader spins for the answer.
func (r *Reader) Due() {
	if r.parked.Load() {
		r.conn.SetReadDeadline(aLongTimeAgo)
	}
}

// aLongTimeAgo is a deadline in the past: it ends a blocked read at once.
var aLongTimeAgo = time.Unix(1, 0)

// Read reads what has arrived, polling up to the current spin for
// something to arrive before it blocks (with the connection's deadline,
// unless SpinWhileDue gave the deadline to the reader).
func (r *Reader) Read(p []byte) (int, error) {
	if r.due == nil {
		return r.read(p)
	}
	for {
		n, err := r.read(p)
		if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		r.conn.SetReadDeadline(time.Time{}) // Due's: an answer is due now
	}
}

// idle reports whether a reader with SpinWhileDue has nothing due. It
// marks the reader parked first and the sender records its request
// before it looks (Due): one of the two sees the other.
func (r *Reader) idle() bool {
	r.parked.Store(true)
	if r.due() {
		r.parked.Store(false)
		return false
	}
	return true
}

func (r *Reader) read(p []byte) (int, error) {
	if r.raw == nil || len(p) == 0 {
		return r.conn.Read(p)
	}
	if r.due != nil && r.idle() {
		n, err := r.conn.Read(p)
		r.parked.Store(false)
		return n, err
	}
	spin := r.pol.budget(time.Now())
	if spin <= 0 || !acquire() {
		return r.conn.Read(p)
	}
	start := time.Now()
	n, o, err := r.poll(p, spin)
	spinning.Add(-1) // before blocking: a blocked reader is not spinning
	switch o {
	case gotData:
		r.pol.ended(o, time.Since(start), time.Now())
	case preempted:
		r.pol.ended(o, 0, time.Now())
		n, err = r.conn.Read(p)
	case timedOut:
		n, err = r.conn.Read(p)
		now := time.Now()
		r.pol.ended(o, now.Sub(start), now)
	}
	return n, err
}

// poll reads p without blocking until something arrives or the
// connection fails (gotData), the spin times out, or the spinning thread
// is switched out involuntarily (preempted): in both the caller blocks.
func (r *Reader) poll(p []byte, spin time.Duration) (n int, o outcome, err error) {
	start := time.Now()
	before := r.switches()
	for i := 1; ; i++ {
		var rerr error
		err := r.raw.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), p)
			return true // never wait for readiness here
		})
		switch {
		case err != nil: // closed
			return 0, gotData, err
		case n > 0:
			return n, gotData, nil
		case rerr == nil: // n == 0: the peer closed its end
			return 0, gotData, io.EOF
		case !errors.Is(rerr, unix.EAGAIN) && !errors.Is(rerr, unix.EINTR):
			return 0, gotData, rerr
		}
		if time.Since(start) >= spin {
			return 0, timedOut, nil
		}
		if i%checkEvery == 0 {
			now := r.switches()
			if sameThread(now, before) && now != before {
				return 0, preempted, nil
			}
			before = now // moved: count from here on the new thread
		}
		runtime.Gosched() // what the spin waits for may be a goroutine here
	}
}

// involuntarySwitches is how many times the calling thread was switched
// out while it could still run (getrusage's ru_nivcsw for the thread),
// with the thread's id in the high bits (sameThread): a goroutine may move
// between threads while it spins, and only one thread's count compares.
// -1 if it cannot be read, which never changes, so nothing is seen
// preempted.
func involuntarySwitches() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return -1
	}
	return int64(unix.Gettid())<<40 | ru.Nivcsw&(1<<40-1)
}

// sameThread reports whether two involuntarySwitches come from one thread.
func sameThread(a, b int64) bool { return a>>40 == b>>40 }

// acquire takes a spinner's place if one is free; the caller gives it
// back with spinning.Add(-1).
func acquire() bool {
	if spinning.Add(1) > maxSpinners {
		spinning.Add(-1)
		return false
	}
	return true
}
