package remote

import (
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"simpler/internal/orphan"
)

// A session process ends by itself when its parent leaves: it sees the
// connection close and stops (orphan.Grace bounds its cleanup). One that
// cannot see it, because it was sent SIGSTOP or is wedged, would hold its
// slot, its memory and its shared-memory objects for ever. So the daemon
// keeps its own descriptor of every session's connection and looks at it
// every reapLook: once the parent has hung up (or the daemon is closing),
// the session has ReapGrace to end, and is then sent SIGKILL (which ends
// a stopped process too). When any session process has ended, the daemon
// reaps it, settles its memory, sweeps its shm prefix (a session has one
// of its own) and gives its slot back.

// reapLook is how often the daemon looks at its sessions' connections.
const reapLook = 100 * time.Millisecond

// DefaultReapGrace is how long a session may take to end once its parent
// has left, unless the daemon is told otherwise: the session's own grace,
// and a second more.
const DefaultReapGrace = orphan.Grace + time.Second

// reapWatch decides when a session whose parent left is killed. It does no
// I/O, so tests step it directly.
type reapWatch struct {
	grace  time.Duration
	left   time.Time // when the parent was first seen gone; zero while present
	killed bool
}

// step notes at now whether the session's parent is gone (or the daemon
// closing) and reports whether the session is to be killed now: once, when
// it has been gone for the grace.
func (w *reapWatch) step(now time.Time, gone bool) bool {
	if !gone || w.killed {
		return false
	}
	if w.left.IsZero() {
		w.left = now
	}
	if now.Sub(w.left) < w.grace {
		return false
	}
	w.killed = true
	return true
}

// reap looks at the sessions every reapLook and kills those whose parent
// left more than the grace ago, until the daemon is closed and has no
// session left.
func (d *Daemon) reap() {
	defer d.wg.Done()
	tick := time.NewTicker(reapLook)
	defer tick.Stop()
	for range tick.C {
		d.mu.Lock()
		closed := d.closed
		if closed && len(d.sessions) == 0 && d.starting == 0 {
			d.mu.Unlock()
			return
		}
		sessions := make([]*dsession, 0, len(d.sessions))
		for _, s := range d.sessions {
			sessions = append(sessions, s)
		}
		d.mu.Unlock()
		now := time.Now()
		for _, s := range sessions {
			if s.exited.Load() {
				continue // its output is still being drained
			}
			if s.reap.step(now, closed || parentGone(s.parent)) {
				fmt.Fprintf(d.cfg.Log, "simpler remote-l3-worker: session %016x (pid %d) did not end within %v of its parent leaving; killing it\n",
					s.id, s.cmd.Process.Pid, s.reap.grace)
				s.cmd.Process.Kill()
			}
		}
	}
}

// parentGone reports whether the parent end of a session's connection has
// hung up. It polls the daemon's descriptor without reading from it: the
// bytes are the session's. (The descriptor is held by Control, so it
// cannot be closed and reused under the poll.)
func parentGone(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	cerr := raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		n, err := unix.Poll(fds, 0)
		gone = err == nil && n > 0 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
	})
	return gone || cerr != nil
}
