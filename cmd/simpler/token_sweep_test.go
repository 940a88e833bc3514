package main

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// startTokenDaemon starts `simpler remote-l3-worker` with a token it
// generates and returns it with the path of its token file, once it says
// it listens.
func startTokenDaemon(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	exe, _ := os.Executable()
	d := exec.Command(exe, "remote-l3-worker", "--listen", "127.0.0.1:0")
	d.Env = cliEnv()
	out, _ := d.StdoutPipe()
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	r.ReadString('\n') // listening on ...
	second, err := r.ReadString('\n')
	path, ok := strings.CutPrefix(strings.TrimSpace(second), "simpler remote-l3-worker: token in ")
	path, _, _ = strings.Cut(path, " ")
	if err != nil || !ok {
		d.Process.Kill()
		d.Wait()
		t.Fatalf("the daemon did not say where its token is: %q, %v", second, err)
	}
	return d, path
}

func fileGone(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, fs.ErrNotExist)
}

// A daemon killed with -9 cannot remove its token file; the next daemon
// to start removes it, because nothing holds the file's lock any more
// (internal/token's SweepStale), and leaves a live daemon's alone. A
// daemon that stops cleanly removes its own.
func TestDaemonSweepsTheTokenFileOfAKilledDaemon(t *testing.T) {
	live, livePath := startTokenDaemon(t)
	defer func() {
		live.Process.Signal(os.Interrupt)
		live.Wait()
	}()
	killed, killedPath := startTokenDaemon(t)
	killed.Process.Signal(syscall.SIGKILL)
	killed.Wait()
	if fileGone(killedPath) {
		t.Fatal("a daemon killed with -9 removed its token file: nothing to sweep")
	}
	next, nextPath := startTokenDaemon(t)
	if !fileGone(killedPath) {
		t.Errorf("the killed daemon's token file %s outlived the next daemon's start", killedPath)
	}
	if fileGone(livePath) || fileGone(nextPath) {
		t.Errorf("a live daemon's token file was removed (%s: gone %v; %s: gone %v)", livePath, fileGone(livePath), nextPath, fileGone(nextPath))
	}
	next.Process.Signal(os.Interrupt)
	next.Wait()
	if !fileGone(nextPath) {
		t.Errorf("a daemon that stopped cleanly left its token file %s", nextPath)
	}
}
