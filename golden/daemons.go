package golden

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DaemonStartTimeout bounds how long StartDaemons waits for one daemon's
// "listening on" line.
const DaemonStartTimeout = 30 * time.Second

// daemonStopTimeout is how long a daemon may take to exit after SIGINT
// before it is killed.
const daemonStopTimeout = 10 * time.Second

const listeningPrefix = "simpler remote-l3-worker: listening on "

// StartDaemons starts n `remote-l3-worker` daemons of binary on free
// loopback ports, each with a token it generates (a client of the same
// user finds it), and waits until each says it listens. env is added to
// the environment and flags to each daemon's command line (simpler run
// --race gives --race); the daemons' stderr goes to stderr. Each runs in a
// process group of its own (a terminal's Ctrl-C is for the script, which
// then stops them) and gets SIGTERM if this process dies first. stop
// interrupts them and waits for them to exit, killing any that take more
// than a few seconds; it may be called more than once, from any goroutine (later calls
// wait for the first).
func StartDaemons(binary string, env []string, n int, stderr io.Writer, flags ...string) (addrs []string, stop func(), err error) {
	var cmds []*exec.Cmd
	var once sync.Once
	stop = func() {
		once.Do(func() {
			for _, c := range cmds {
				c.Process.Signal(os.Interrupt)
			}
			for _, c := range cmds {
				waitOrKill(c, daemonStopTimeout)
			}
		})
	}
	for i := 0; i < n; i++ {
		c, addr, err := startDaemon(binary, env, stderr, flags)
		if c != nil {
			cmds = append(cmds, c)
		}
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("remote-l3-worker daemon %d of %d did not start: %v", i+1, n, err)
		}
		addrs = append(addrs, addr)
	}
	return addrs, stop, nil
}

// startDaemon starts one daemon and reads its address. c is non-nil once
// the process runs, even with an error, so that the caller stops it.
func startDaemon(binary string, env []string, stderr io.Writer, flags []string) (c *exec.Cmd, addr string, err error) {
	c = exec.Command(binary, append([]string{"remote-l3-worker", "--listen", "127.0.0.1:0", "--quiet-sessions"}, flags...)...)
	c.Env = append(os.Environ(), env...)
	c.Stderr = stderr
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	out, err := c.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := c.Start(); err != nil {
		return nil, "", err
	}
	// Readiness is the daemon's own line, not a sleep; a daemon that
	// neither says it listens nor exits is given up on.
	type result struct {
		line string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		got <- result{line, err}
		if err == nil {
			io.Copy(io.Discard, out)
		}
	}()
	select {
	case r := <-got:
		addr, ok := strings.CutPrefix(strings.TrimSpace(r.line), listeningPrefix)
		if r.err != nil || !ok {
			return c, "", fmt.Errorf("it said %q (%v)", r.line, r.err)
		}
		return c, addr, nil
	case <-time.After(DaemonStartTimeout):
		c.Process.Kill()
		return c, "", fmt.Errorf("no %q line within %v", strings.TrimSpace(listeningPrefix), DaemonStartTimeout)
	}
}

// waitOrKill waits for c to exit, killing it after limit.
func waitOrKill(c *exec.Cmd, limit time.Duration) {
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		c.Process.Kill()
		<-done
	}
}
