package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"simpler/hal/shm"
	"simpler/internal/leakcheck"
	"simpler/internal/mpitest"
)

// asCLI makes this test binary behave as the simpler command, so that
// tests can start it as a child process (`simpler test` starts children
// through os.Executable(), which is this binary under `go test`).
const asCLI = "SIMPLER_TEST_AS_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(asCLI) == "1" {
		code := Main(os.Args[1:], os.Stdout, os.Stderr)
		shm.Finish() // as main does
		os.Exit(code)
	}
	leakcheck.Main(m) // which counts os/signal's goroutine (`simpler test` watches SIGINT) in its baseline
}

// cliEnv is the environment of a child run as the CLI (with mpirun's
// consent to run as root, for the worker groups it starts: mpitest.Env),
// under a shm prefix of its own, which checkNoShm finds in it.
func cliEnv(extra ...string) []string {
	env := append(append(os.Environ(), asCLI+"=1", "SIMPLER_PLATFORM="), mpitest.Env()...)
	return append(append(env, shm.PrefixEnv+"="+shm.NewPrefix()), extra...)
}

// writeFiles writes name → contents under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, src := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkNoShm fails if the process that ran with env (cliEnv's) left
// shared memory behind, or its prefix's lock: a clean exit leaves nothing.
func checkNoShm(t *testing.T, env []string) {
	t.Helper()
	prefix := prefixOf(env)
	if prefix == "" {
		t.Fatal("checkNoShm: the process had no prefix of its own (cliEnv gives one)")
	}
	checkNoShmPrefix(t, prefix)
}

// checkNoShmPrefix fails if objects under prefix, or its lock, are left.
func checkNoShmPrefix(t *testing.T, prefix string) {
	t.Helper()
	if left, _ := shm.Leftovers(prefix); len(left) > 0 {
		t.Errorf("the processes of %s left shared-memory objects behind: %v", prefix, left)
	}
	if _, err := os.Lstat("/dev/shm/" + shm.LockName(prefix)); err == nil {
		t.Errorf("the processes of %s left their prefix's lock behind", prefix)
	}
	shm.SweepPrefix(prefix)
}

// pidPrefix is the shm prefix process pid runs under, from its
// environment ("" if it has none or is gone).
func pidPrefix(pid int) string {
	env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	return prefixOf(strings.Split(string(env), "\x00"))
}

// prefixOf is the shm prefix env (cliEnv's) gives a process, or "".
func prefixOf(env []string) string {
	prefix := ""
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, shm.PrefixEnv+"="); ok {
			prefix = p
		}
	}
	return prefix
}

// ptyChild is a child process whose stdin, stdout and stderr are the
// slave side of a pseudo-terminal, which is also its controlling
// terminal, so that Ctrl-C written to the master becomes SIGINT.
type ptyChild struct {
	t      *testing.T
	master *os.File
	cmd    *exec.Cmd

	mu     sync.Mutex
	out    bytes.Buffer
	seen   int // output before this offset has been matched already
	update chan struct{}
	readed chan struct{} // closed when the reader goroutine ends
}

// openPTY opens a new pseudo-terminal pair: posix_openpt, unlockpt and
// ptsname done by hand with the Linux ioctls.
func openPTY() (master, slave *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil { // unlockpt
		master.Close()
		return nil, nil, fmt.Errorf("unlockpt: %w", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN) // ptsname
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("ptsname: %w", err)
	}
	name := fmt.Sprintf("/dev/pts/%d", n)
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	if err := unix.IoctlSetWinsize(sfd, unix.TIOCSWINSZ, &unix.Winsize{Row: 50, Col: 160}); err != nil {
		master.Close()
		unix.Close(sfd)
		return nil, nil, fmt.Errorf("set window size: %w", err)
	}
	return master, os.NewFile(uintptr(sfd), name), nil
}

// startPTY starts this binary as `simpler args...` on a new terminal.
func startPTY(t *testing.T, env []string, args ...string) *ptyChild {
	t.Helper()
	master, slave, err := openPTY()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		master.Close()
		slave.Close()
		t.Fatal(err)
	}
	slave.Close() // the child has it
	p := &ptyChild{t: t, master: master, cmd: cmd, update: make(chan struct{}, 1), readed: make(chan struct{})}
	go p.read()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
		p.master.Close()
		<-p.readed
	})
	return p
}

func (p *ptyChild) read() {
	defer close(p.readed)
	buf := make([]byte, 4096)
	for {
		n, err := p.master.Read(buf)
		if n > 0 {
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			select {
			case p.update <- struct{}{}:
			default:
			}
		}
		if err != nil { // EIO once the child has exited and closed the slave
			return
		}
	}
}

// send writes keystrokes to the terminal.
func (p *ptyChild) send(s string) {
	p.t.Helper()
	if _, err := p.master.Write([]byte(s)); err != nil {
		p.t.Fatalf("writing %q to the terminal: %v", s, err)
	}
}

// expect waits until want appears in the output after the last match,
// and moves past it.
func (p *ptyChild) expect(want string) {
	p.t.Helper()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		rest := p.out.String()[p.seen:]
		if i := strings.Index(rest, want); i >= 0 {
			p.seen += i + len(want)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		select {
		case <-p.update:
		case <-p.readed:
			p.mu.Lock()
			rest := p.out.String()[p.seen:]
			p.mu.Unlock()
			if !strings.Contains(rest, want) {
				p.t.Fatalf("the terminal closed without showing %q; output since the last match:\n%s", want, rest)
			}
		case <-deadline.C:
			p.t.Fatalf("timed out waiting for %q; output since the last match:\n%s", want, rest)
		}
	}
}

// output is everything the terminal showed.
func (p *ptyChild) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// wait waits for the child to exit and returns its exit code.
func (p *ptyChild) wait() int {
	p.t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		if err != nil {
			p.t.Fatal(err)
		}
		return 0
	case <-time.After(60 * time.Second):
		p.cmd.Process.Kill()
		<-done
		p.t.Fatalf("the process did not exit; output:\n%s", p.output())
		return -1
	}
}
