package remote

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"simpler/wire"
)

// A link is the Unix seqpacket socket between a daemon and one of its
// session processes (wire/link.go has the messages). One message is one
// packet; a LINK_GRANT carries the export's shared-memory object as a
// descriptor, so no object name ever crosses it.
type link struct {
	conn *net.UnixConn
	wmu  sync.Mutex // one packet written at a time
}

// linkPair makes the two ends of a new link: this process's, and the file
// a child process inherits.
func linkPair() (*link, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("link: socketpair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "link"), os.NewFile(uintptr(fds[1]), "link")
	l, err := fileLink(mine)
	if err != nil {
		theirs.Close()
		return nil, nil, err
	}
	return l, theirs, nil
}

// fileLink makes a link of an inherited socket; f is closed.
func fileLink(f *os.File) (*link, error) {
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("link: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("link: not a Unix socket")
	}
	return &link{conn: uc}, nil
}

// send writes m, with fd attached when fd >= 0 (the caller keeps fd).
func (l *link) send(m *wire.Link, fd int) error {
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	_, _, err := l.conn.WriteMsgUnix(wire.Payload(m), oob, nil)
	return err
}

// recv reads the next message and the descriptor it carries (-1: none),
// which the caller must close. A message that does not decode is an
// error; its descriptors are closed.
func (l *link) recv(buf, oob []byte) (wire.Link, int, error) {
	n, oobn, _, _, err := l.conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return wire.Link{}, -1, err
	}
	if n == 0 && oobn == 0 {
		return wire.Link{}, -1, io.EOF // the other end closed
	}
	fd, ferr := takeFD(oob[:oobn])
	m, err := wire.DecodeLink(buf[:n])
	if err == nil {
		err = ferr
	}
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return wire.Link{}, -1, err
	}
	return m, fd, nil
}

// takeFD returns the one descriptor in a control message (-1 if none);
// any beyond one are closed and refused.
func takeFD(oob []byte) (int, error) {
	if len(oob) == 0 {
		return -1, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return -1, fmt.Errorf("link: control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	if len(fds) > 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, errors.New("link: more than one descriptor in a message")
	}
	if len(fds) == 0 {
		return -1, nil
	}
	return fds[0], nil
}

// linkBuffers are the read buffers of one link reader.
func linkBuffers() ([]byte, []byte) {
	return make([]byte, wire.MaxLink+1), make([]byte, unix.CmsgSpace(4*4))
}

func (l *link) close() error { return l.conn.Close() }
