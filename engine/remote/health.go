package remote

import (
	"io"
	"sync/atomic"
	"time"
)

// A parent notices a node that has stopped answering (its session process
// sent SIGSTOP, its host gone quiet) while the node runs tasks within
// remote_session_timeout_s of the last bytes it sent, not of a probe sent
// later: the watch below counts silence from the last read, probes often
// enough that a live node is never silent for long, and wakes at the
// deadline itself. (Probing every third of the timeout and waiting a full
// timeout for each probe noticed it only after up to 4/3 of the bound.)

// probesPerTimeout is how many probes a busy node is sent per timeout: a
// live node answers each at once (its reader answers HEALTH when it reads
// it), so it is heard from several times a timeout.
const probesPerTimeout = 4

// idleLook bounds how long a watch of an idle node sleeps, so that the
// silence of a node that becomes busy is counted from no later than this
// after its first task is sent.
const idleLook = 100 * time.Millisecond

// healthAction is what the watch asks of its caller.
type healthAction int

const (
	healthWait  healthAction = iota // nothing now
	healthProbe                     // send a HEALTH
	healthDead                      // the node has been silent for the timeout
)

// healthWatch decides from the clock alone when a node is probed and when
// it is dead; times are durations on one monotonic clock. It does no I/O,
// so tests step it directly.
type healthWatch struct {
	timeout time.Duration
	busy    bool          // tasks were in flight at the last step
	since   time.Duration // silence is counted from the later of this and the last read
	probed  time.Duration // the last probe
}

func newHealthWatch(timeout time.Duration) *healthWatch {
	return &healthWatch{timeout: timeout}
}

// every is the interval between probes of a busy node.
func (w *healthWatch) every() time.Duration { return max(w.timeout/probesPerTimeout, time.Millisecond) }

// step is the watch at now, given when the node was last heard from and
// whether tasks are in flight. It returns what to do now and how long to
// wait before the next step.
func (w *healthWatch) step(now, heard time.Duration, busy bool) (healthAction, time.Duration) {
	if !busy {
		w.busy = false
		return healthWait, min(w.every(), idleLook)
	}
	if !w.busy { // busy from now on: an idle node owed no answers
		w.busy, w.since, w.probed = true, now, now
		return healthProbe, w.wake(now, heard)
	}
	silentFrom := max(w.since, heard)
	if now-silentFrom >= w.timeout {
		return healthDead, 0
	}
	if now-w.probed >= w.every() {
		w.probed = now
		return healthProbe, w.wake(now, heard)
	}
	return healthWait, w.wake(now, heard)
}

// wake is how long to sleep after a step at now: until the next probe or
// the deadline, whichever is first.
func (w *healthWatch) wake(now, heard time.Duration) time.Duration {
	next := min(w.probed+w.every(), max(w.since, heard)+w.timeout)
	return max(next-now, 0)
}

// heardReader records, on a monotonic clock, when bytes last arrived.
// Every read counts, not only whole frames, so a reply larger than a
// probe interval's worth of bandwidth never looks like silence.
type heardReader struct {
	r     io.Reader
	start time.Time
	last  atomic.Int64 // nanoseconds since start
}

func newHeardReader(r io.Reader) *heardReader {
	return &heardReader{r: r, start: time.Now()}
}

func (h *heardReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if n > 0 {
		h.last.Store(int64(time.Since(h.start)))
	}
	return n, err
}

// now is the watch's clock.
func (h *heardReader) now() time.Duration { return time.Since(h.start) }

// heard is when bytes last arrived.
func (h *heardReader) heard() time.Duration { return time.Duration(h.last.Load()) }
