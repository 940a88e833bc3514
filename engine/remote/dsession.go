package remote

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"simpler/engine"
	"simpler/hal/shm"
	"simpler/wire"
)

// The daemon's side of its sessions: the slot taken before the
// process starts (so --max-sessions holds), the process with its
// connection, link, memory ledger and output pipes, the link's traffic
// routed between sessions (an IMPORT resolved by the export's owner),
// and the end: reaped, its bytes settled, its prefix swept, its slot
// given back.

// dsession is a session process as its daemon sees it.
type dsession struct {
	slot   uint64
	id     uint64 // the session id its parent chose
	cmd    *exec.Cmd
	link   *link
	out    *sessionOutput
	prefix string        // the shm prefix of its objects, its own
	parent net.Conn      // the daemon's descriptor of the session's connection: is the parent still there?
	reap   reapWatch     // used by the reaper alone
	exited atomic.Bool   // the process has been reaped: nothing left to kill
	ended  chan struct{} // closed once the process has ended and is forgotten
}

// linkRoute is one LINK_RESOLVE in flight: which session was asked, and
// how its answer goes back to whoever asked (a session of this daemon or
// a peer daemon), under the asker's request number.
type linkRoute struct {
	owner uint64
	from  uint64 // the asking session's slot; 0 for a peer daemon
	reply func(m *wire.Link, fd int)
}

// startSession starts the session process for an authenticated
// connection and hands it the connection and its end of a new link. Its
// slot among MaxSessions is taken before the process starts and given
// back when it fails to. On success the session owns conn (closed once
// its process has ended); on failure the caller closes it.
func (d *Daemon) startSession(conn net.Conn, start *wire.Link) (*dsession, error) {
	s, err := d.reserve(start.Session)
	if err != nil {
		return nil, refuse(conn, wire.Header{Version: wire.ProtocolVersion, Session: start.Session, Worker: start.Worker}, err)
	}
	start.Slot = s.slot
	s.prefix = shm.NewPrefix()
	cmd, l, out, err := d.spawn(conn, start.Session, s.prefix)
	if err != nil {
		d.unreserve(s)
		return nil, refuse(conn, wire.Header{Version: wire.ProtocolVersion, Session: start.Session, Worker: start.Worker},
			engine.Errorf(engine.RuntimeError, "the session process did not start: %v", err))
	}
	s.cmd, s.link, s.out, s.parent = cmd, l, out, conn
	s.reap.grace = d.cfg.ReapGrace
	if err := l.send(start, -1); err != nil {
		cmd.Process.Kill()
	}
	d.mu.Lock()
	d.starting--
	d.sessions[s.slot] = s
	if d.closed {
		// Close has signalled the sessions it saw; this one was starting.
		cmd.Process.Signal(os.Interrupt)
	}
	d.wg.Add(1)
	d.mu.Unlock()
	go d.serveLink(s)
	return s, nil
}

// reserve takes a slot for a session with id session, or says why there
// is none: the daemon is closing, it serves MaxSessions already (running
// or starting), or the id is live.
func (d *Daemon) reserve(session uint64) (*dsession, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch n := len(d.sessions) + d.starting; {
	case d.closed:
		return nil, engine.Errorf(engine.RuntimeError, "the daemon is closing")
	case d.live[session]:
		return nil, engine.Errorf(engine.ValueError, "HELLO: session id %#x is live in this daemon already (a session id is used once)", session)
	case n >= d.cfg.MaxSessions:
		return nil, engine.Errorf(engine.RuntimeError, "the daemon serves %d sessions, its bound (--max-sessions)", n)
	}
	d.starting++
	d.live[session] = true
	d.slots++
	return &dsession{slot: d.slots, id: session, ended: make(chan struct{})}, nil
}

// unreserve gives back the slot of a session whose process did not start.
func (d *Daemon) unreserve(s *dsession) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.starting--
	delete(d.live, s.id)
}

// spawn starts a session process with conn as fd 3, a link as fd 4 and
// the memory ledger as fd 5, its stdout and stderr pipes the daemon reads,
// under the shm prefix given: its own, so that what it leaves if it is
// killed is proven dead as soon as it is gone (serveLink sweeps it).
func (d *Daemon) spawn(conn net.Conn, session uint64, prefix string) (*exec.Cmd, *link, *sessionOutput, error) {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return nil, nil, nil, fmt.Errorf("not a TCP connection")
	}
	f, err := tc.File()
	if err != nil {
		return nil, nil, nil, err
	}
	defer f.Close()
	l, theirs, err := linkPair()
	if err != nil {
		return nil, nil, nil, err
	}
	defer theirs.Close()
	out, stdout, stderr, err := newSessionOutput(session, d.cfg.MaxOutputBytes, d.stdout, d.stderr)
	if err != nil {
		l.close()
		return nil, nil, nil, err
	}
	defer stdout.Close()
	defer stderr.Close()
	ls := d.cfg.Session
	cmd := exec.Command(ls.Path, ls.Args...)
	cmd.ExtraFiles = []*os.File{f, theirs, d.memFile} // fds 3, 4 and ledgerFD
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = append(append(os.Environ(), ls.Env...), shm.PrefixEnv+"="+prefix)
	if err := cmd.Start(); err != nil {
		l.close()
		out.finish(0)
		return nil, nil, nil, err
	}
	return cmd, l, out, nil
}

// orStd is w, or def when w is nil (a Launcher's Stdout and Stderr).
func orStd(w io.Writer, def *os.File) io.Writer {
	if w != nil {
		return w
	}
	return def
}

// serveLink forwards the session's export resolution until its process
// ends, then forgets it.
func (d *Daemon) serveLink(s *dsession) {
	defer d.wg.Done()
	buf, oob := linkBuffers()
	for {
		m, fd, err := s.link.recv(buf, oob)
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			break
		}
		if err != nil {
			fmt.Fprintf(d.cfg.Log, "simpler remote-l3-worker: session %016x: %v; ending it\n", s.id, err)
			s.cmd.Process.Kill()
			break
		}
		switch m.Kind {
		case wire.LinkResolve:
			closeFD(fd)
			d.forwardResolve(s, m)
		case wire.LinkGrant:
			d.forwardGrant(s, m, fd)
			closeFD(fd)
		default:
			closeFD(fd)
		}
	}
	s.link.close()
	exit := s.cmd.Wait()
	s.exited.Store(true)
	s.parent.Close()
	d.mem.settle(s.slot) // its bytes come back however it ended
	s.out.finish(outputGrace)
	if left := sweptObjects(s.prefix); len(left) > 0 {
		how := "exited"
		if exit != nil {
			how = exit.Error()
		}
		fmt.Fprintf(d.cfg.Log, "simpler remote-l3-worker: session %016x (%s) ended leaving %d shared-memory objects; removed them\n", s.id, how, len(left))
	}
	if !d.cfg.QuietSessions {
		fmt.Fprintf(d.cfg.Log, "simpler remote-l3-worker: session %016x from %v ended: %v\n", s.id, s.parent.RemoteAddr(), s.cmd.ProcessState)
	}
	d.dropSession(s)
	close(s.ended)
}

// sweptObjects removes what a session that has ended left under its
// prefix (a killed one skips its cleanup) and returns the objects among
// it. Processes it started that still hold the prefix's lock keep it all
// for a later sweep.
func sweptObjects(prefix string) []string {
	var objects []string
	for _, n := range shm.SweepPrefix(prefix) {
		if n != shm.LockName(prefix) {
			objects = append(objects, n)
		}
	}
	return objects
}

func closeFD(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// forwardResolve passes a session's import to the export's owner: a
// session of this daemon, or one of a peer daemon on this host.
func (d *Daemon) forwardResolve(from *dsession, m wire.Link) {
	req := m.Req
	reply := func(g *wire.Link, fd int) {
		g.Req = req
		from.link.send(g, fd)
	}
	if m.ID.Daemon != d.id {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			resolveAtPeer(m, reply)
		}()
		return
	}
	d.route(m, from.slot, reply)
}

// route asks the owning session of this daemon for an export and has its
// grant sent with reply.
func (d *Daemon) route(m wire.Link, from uint64, reply func(*wire.Link, int)) {
	d.mu.Lock()
	owner := d.sessions[m.ID.Slot]
	if owner == nil {
		d.mu.Unlock()
		reply(grantError(0, errStaleExport), -1)
		return
	}
	d.reqs++
	r := d.reqs
	d.routes[r] = linkRoute{owner: owner.slot, from: from, reply: reply}
	d.mu.Unlock()
	if err := owner.link.send(&wire.Link{Kind: wire.LinkResolve, Req: r, ID: m.ID, Parent: m.Parent}, -1); err != nil {
		d.mu.Lock()
		delete(d.routes, r)
		d.mu.Unlock()
		reply(grantError(0, errStaleExport), -1)
	}
}

var errStaleExport = engine.Errorf(engine.RuntimeError, "IMPORT: the session that made this export has ended (a stale export id)")

// forwardGrant passes an owner's answer back to whoever asked. Only the
// session that was asked may answer, once.
func (d *Daemon) forwardGrant(owner *dsession, m wire.Link, fd int) {
	d.mu.Lock()
	rt, ok := d.routes[m.Req]
	if ok && rt.owner == owner.slot {
		delete(d.routes, m.Req)
	}
	d.mu.Unlock()
	if !ok || rt.owner != owner.slot {
		return
	}
	if m.Err == nil && fd < 0 {
		rt.reply(grantError(0, engine.Errorf(engine.RuntimeError, "IMPORT: the exporting session sent no memory")), -1)
		return
	}
	rt.reply(&m, fd)
}

func grantError(req uint64, err error) *wire.Link {
	return &wire.Link{Kind: wire.LinkGrant, Req: req, Err: errBody(err)}
}

// dropSession forgets an ended session; resolves it was asked fail, and
// answers meant for it are dropped.
func (d *Daemon) dropSession(s *dsession) {
	d.mu.Lock()
	delete(d.sessions, s.slot)
	delete(d.live, s.id)
	var failed []func(*wire.Link, int)
	for r, rt := range d.routes {
		switch {
		case rt.owner == s.slot && rt.from != s.slot:
			failed = append(failed, rt.reply)
			delete(d.routes, r)
		case rt.from == s.slot:
			delete(d.routes, r)
		}
	}
	d.mu.Unlock()
	for _, reply := range failed {
		reply(grantError(0, errStaleExport), -1)
	}
}
