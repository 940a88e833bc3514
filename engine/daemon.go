package engine

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"simpler/hal/shm"
)

// Daemon serves remote L3 sessions: each accepted connection is handed to
// a session process of its own (the same binary), so a session that fails
// or a client that misbehaves never takes the daemon down.
type Daemon struct {
	ln      net.Listener
	session *Launcher // the command that runs one session; the connection is its fd 3
	log     io.Writer

	mu       sync.Mutex
	sessions map[*exec.Cmd]struct{}
	wg       sync.WaitGroup
	closed   bool
}

// NewDaemon serves ln; session says how to start a session process.
func NewDaemon(ln net.Listener, session *Launcher, log io.Writer) *Daemon {
	return &Daemon{ln: ln, session: session, log: log, sessions: map[*exec.Cmd]struct{}{}}
}

// Serve accepts connections until Close.
func (d *Daemon) Serve() error {
	for {
		conn, err := d.ln.Accept()
		if err != nil {
			d.mu.Lock()
			closed := d.closed
			d.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if err := d.start(conn); err != nil {
			fmt.Fprintf(d.log, "simpler remote-l3-worker: session from %s: %v\n", conn.RemoteAddr(), err)
		}
	}
}

// start hands conn to a new session process.
func (d *Daemon) start(conn net.Conn) error {
	defer conn.Close() // the session process has its own descriptor
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return fmt.Errorf("not a TCP connection")
	}
	f, err := tc.File()
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(d.session.Path, d.session.Args...)
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stdout, cmd.Stderr = orStd(d.session.Stdout, os.Stdout), orStd(d.session.Stderr, os.Stderr)
	if d.session.Env != nil {
		cmd.Env = append(os.Environ(), d.session.Env...)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("the daemon is closing")
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	d.sessions[cmd] = struct{}{}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		cmd.Wait()
		d.mu.Lock()
		delete(d.sessions, cmd)
		d.mu.Unlock()
	}()
	return nil
}

// Close stops accepting, ends the session processes it started and waits
// for them.
func (d *Daemon) Close() error {
	d.mu.Lock()
	d.closed = true
	for cmd := range d.sessions {
		cmd.Process.Signal(os.Interrupt)
	}
	d.mu.Unlock()
	err := d.ln.Close()
	d.wg.Wait()
	return err
}

// ServeSessionFD runs the session whose connection is file descriptor 3
// (how Daemon starts it).
func ServeSessionFD(token []byte, newResolver SourceResolver) error {
	shm.SweepDead() // names under this pid left by an earlier process would collide
	f := os.NewFile(3, "session")
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return err
	}
	// An interrupt (the daemon closing) ends the session the clean way:
	// closing the connection ends serve, which frees what it holds.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		// A session outlives neither an interrupt nor its daemon: a daemon
		// that is killed takes its sessions with it, so the parent sees the
		// connection drop and fails the task in flight.
		ppid := os.Getppid()
		tick := time.NewTicker(pollEvery)
		defer tick.Stop()
		for {
			select {
			case <-sig:
				abandon(conn)
				return
			case <-tick.C:
				if os.Getppid() != ppid {
					abandon(conn)
					return
				}
			case <-done:
				return
			}
		}
	}()
	err = RunSession(conn, token, newResolver)
	signal.Stop(sig)
	close(done)
	return err
}

// sessionGrace is how long an abandoned session may take to finish the
// task it is running before the process ends without it.
const sessionGrace = 2 * time.Second

// abandon ends a session whose daemon is gone or that was interrupted:
// closing the connection ends serve, which frees what the session holds
// once its running task returns. A task that does not return in time
// (a kernel in a long loop) must not keep the process alive: its shared
// memory is removed and the process exits.
func abandon(conn net.Conn) {
	conn.Close()
	time.AfterFunc(sessionGrace, func() {
		shm.RemoveOwn()
		os.Exit(1)
	})
}
