package token

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// writerEnv makes the test binary a writer: it Generates the token of the
// port given, says so on stdout, and Removes it when its stdin closes.
const writerEnv = "SIMPLER_TOKEN_TEST_WRITER"

func runWriter(portText string) int {
	port, _ := strconv.Atoi(portText)
	path, _, err := Generate(port)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	os.Stdout.WriteString(path + "\n")
	io.Copy(io.Discard, os.Stdin)
	if err := Remove(path); err != nil {
		return 1
	}
	return 0
}

// writer is a writer process of this test.
type writer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	path  string
}

func startWriter(t *testing.T, xdg string, port int) *writer {
	t.Helper()
	exe, _ := os.Executable()
	w := &writer{cmd: exec.Command(exe)}
	w.cmd.Env = append(os.Environ(), writerEnv+"="+strconv.Itoa(port), "XDG_RUNTIME_DIR="+xdg)
	w.cmd.Stderr = os.Stderr
	w.stdin, _ = w.cmd.StdinPipe()
	out, _ := w.cmd.StdoutPipe()
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		w.cmd.Process.Kill()
		w.cmd.Wait()
		t.Fatalf("writer of port %d: %v", port, err)
	}
	w.path = strings.TrimSpace(line)
	return w
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// A writer killed with -9 leaves its token file; the next Generate (a
// daemon starting) removes it, because nothing holds its lock. A live
// writer's file, one of another name, a symlink named like a token file,
// and a token file whose lock another process holds are all left alone.
// A writer that stops cleanly removes its own.
func TestSweepStaleRemovesOnlyDeadWriters(t *testing.T) {
	xdg := useXDG(t)
	killed := startWriter(t, xdg, 7101)
	live := startWriter(t, xdg, 7102)
	dir := filepath.Dir(killed.path)
	other := filepath.Join(dir, "notes.token")
	os.WriteFile(other, []byte("not a generated token file\n"), 0o600)
	link := filepath.Join(dir, "remote-l3-worker-7103.token")
	os.Symlink(other, link)
	// A file named like a token, whose lock another open file holds (as a
	// live writer of another build might).
	locked := filepath.Join(dir, "worker-group-7104.token")
	os.WriteFile(locked, []byte("0123456789abcdef0123\n"), 0o600)
	lf, err := os.Open(locked)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	killed.cmd.Process.Signal(syscall.SIGKILL)
	killed.cmd.Wait()
	killed.stdin.Close()
	if !exists(killed.path) {
		t.Fatal("a writer killed with -9 removed its token file: nothing to sweep")
	}
	path, _, err := Generate(7105) // a daemon starting
	if err != nil {
		t.Fatal(err)
	}
	defer Remove(path)
	if exists(killed.path) {
		t.Errorf("the killed writer's %s outlived the next Generate", filepath.Base(killed.path))
	}
	for _, p := range []string{live.path, other, link, locked, path} {
		if !exists(p) {
			t.Errorf("%s was removed; its writer lives (or it is not a generated token file)", filepath.Base(p))
		}
	}
	// A sweep removes nothing more now.
	if removed, err := SweepStale(); err != nil || len(removed) != 0 {
		t.Errorf("a second sweep: %v, %v; want nothing removed", removed, err)
	}
	live.stdin.Close()
	if err := live.cmd.Wait(); err != nil {
		t.Errorf("the live writer: %v", err)
	}
	if exists(live.path) {
		t.Error("a writer that stopped cleanly left its token file")
	}
	// The lock released, that file is stale too.
	lf.Close()
	removed, err := SweepStale()
	if err != nil || !slices.Equal(removed, []string{locked}) {
		t.Errorf("a sweep once its lock is dropped: %v, %v; want %s", removed, err, locked)
	}
}

// Generate's file is locked for as long as the writer has not removed it:
// a lock taken on it now fails; after Remove a new file of that name is
// another file.
func TestGenerateHoldsTheLock(t *testing.T) {
	useXDG(t)
	path, _, err := Generate(7110)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	f.Close()
	if !errors.Is(err, unix.EWOULDBLOCK) {
		t.Errorf("a lock on a held token file: %v, want EWOULDBLOCK", err)
	}
	if err := Remove(path); err != nil {
		t.Fatal(err)
	}
	held.Lock()
	n := len(held.files)
	held.Unlock()
	if n != 0 {
		t.Errorf("%d token files still held after Remove", n)
	}
}

func TestIsTokenName(t *testing.T) {
	for name, want := range map[string]bool{
		"remote-l3-worker-8080.token": true, "worker-group-1.token": true, "worker-group-65535.token": true,
		"remote-l3-worker-0.token": false, "remote-l3-worker-65536.token": false, "remote-l3-worker-080.token": false,
		"remote-l3-worker-.token": false, "remote-l3-worker-80.token.bak": false, "notes.token": false, "remote-l3-worker-+80.token": false,
	} {
		if got := isTokenName(name); got != want {
			t.Errorf("isTokenName(%q) = %v, want %v", name, got, want)
		}
	}
}
