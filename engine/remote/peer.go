package remote

import (
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"simpler/engine"
	"simpler/wire"
)

// Daemons of one user on one host resolve each other's exports through a
// Unix seqpacket socket each listens on, in the abstract namespace, named
// by the user's uid and the daemon's random id. Both ends insist that the
// kernel says the other runs as the same user (SO_PEERCRED), so another
// user can neither ask nor impersonate a daemon; the peer sends one
// LINK_RESOLVE and gets one LINK_GRANT, with the buffer's memory as a
// descriptor. An export id names a daemon by its id alone, so what a
// forged id can reach is one of this user's daemons, which checks the rest.
// (Abstract names leave no file behind when a daemon is killed.)

// peerSock is a daemon's socket for its peers.
type peerSock struct {
	ln   *net.UnixListener
	once sync.Once
}

// peerAddr is the socket of the daemon with id.
func peerAddr(id uint64) *net.UnixAddr {
	return &net.UnixAddr{Name: fmt.Sprintf("@simpler-daemon-%d-%016x", os.Geteuid(), id), Net: "unixpacket"}
}

func listenPeer(id uint64) (*peerSock, error) {
	ln, err := net.ListenUnix("unixpacket", peerAddr(id))
	if err != nil {
		return nil, err
	}
	return &peerSock{ln: ln}, nil
}

func (p *peerSock) close() { p.once.Do(func() { p.ln.Close() }) }

// serve answers peers until the socket closes.
func (p *peerSock) serve(d *Daemon) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := p.ln.AcceptUnix()
		if err != nil {
			return
		}
		if !sameUser(c) {
			c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.answerPeer(&link{conn: c})
		}()
	}
}

// sameUser reports whether the process at the other end of c runs as this
// process's effective uid.
func sameUser(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	return err == nil && cred != nil && int(cred.Uid) == os.Geteuid()
}

// answerPeer serves one resolve from a peer daemon.
func (d *Daemon) answerPeer(l *link) {
	l.conn.SetDeadline(time.Now().Add(importTimeout))
	buf, oob := linkBuffers()
	m, fd, err := l.recv(buf, oob)
	closeFD(fd)
	if err != nil || m.Kind != wire.LinkResolve {
		l.close()
		return
	}
	done := make(chan struct{})
	var once sync.Once
	reply := func(g *wire.Link, fd int) {
		once.Do(func() {
			g.Req = m.Req
			l.send(g, fd)
			close(done)
		})
	}
	if m.ID.Daemon != d.id {
		reply(grantError(0, errNoDaemon), -1)
	} else {
		d.route(m, 0, reply)
	}
	select {
	case <-done:
	case <-time.After(importTimeout):
	case <-d.done:
	}
	l.close()
}

var errNoDaemon = engine.Errorf(engine.ValueError, "IMPORT: no daemon on this host made this export (a forged or stale export id)")

// resolveAtPeer asks the daemon named by m's export id, on this host, for
// the export and passes its answer to reply.
func resolveAtPeer(m wire.Link, reply func(*wire.Link, int)) {
	c, err := net.DialTimeout("unixpacket", peerAddr(m.ID.Daemon).Name, importTimeout)
	if err != nil {
		reply(grantError(0, errNoDaemon), -1)
		return
	}
	l := &link{conn: c.(*net.UnixConn)}
	defer l.close()
	if !sameUser(l.conn) {
		reply(grantError(0, errNoDaemon), -1)
		return
	}
	l.conn.SetDeadline(time.Now().Add(importTimeout))
	if err := l.send(&wire.Link{Kind: wire.LinkResolve, Req: 1, ID: m.ID, Parent: m.Parent}, -1); err != nil {
		reply(grantError(0, errNoDaemon), -1)
		return
	}
	buf, oob := linkBuffers()
	g, fd, err := l.recv(buf, oob)
	if err != nil || g.Kind != wire.LinkGrant || (g.Err == nil && fd < 0) {
		closeFD(fd)
		reply(grantError(0, engine.Errorf(engine.RuntimeError, "IMPORT: the daemon that made this export did not answer: %v", err)), -1)
		return
	}
	reply(&g, fd)
	closeFD(fd)
}
