// Package token reads, checks, generates and finds the shared token that a
// level-4 worker proves to a remote-l3-worker daemon in the handshake
// (docs/protocol.md, "Handshake"; wire/auth.go).
//
// Contract:
//
//   - A token is the first line of its file, surrounding space trimmed, and
//     is at least MinLen bytes. Read refuses a symlink (it opens with
//     O_NOFOLLOW), a file that is not a regular file, one owned by another
//     user, one that group or others can read or write, one larger than
//     MaxFileSize, and a missing, empty or short token. Its refusals never
//     say how long a file or its first line is: a file that is not a token
//     file may be someone's secret. Check applies the length rule to a
//     token given directly.
//   - A daemon without a configured token makes one with Generate: 32 bytes
//     from crypto/rand, hex-encoded, written with mode 0600 to
//     PathFor(port) in RuntimeDir. It calls Remove on that path when it
//     stops.
//   - A process that wrote a token file holds an exclusive flock on it
//     until Remove (or its death: the kernel drops the lock of a process
//     killed with -9). Generate first sweeps RuntimeDir (SweepStale): a
//     token file whose lock it can take has no living writer and is
//     removed; one whose lock is held is left alone. Writers and sweepers
//     take a lock on the directory while they work, so a sweep never sees
//     a file between its creation and its lock.
//   - A client on the same host finds that token with ForEndpoint. A daemon
//     on another host has its token elsewhere: the client must be given it.
//   - RuntimeDir is private to the user: a directory they own, mode 0700,
//     not a symlink. Anything else is refused rather than repaired.
//
// Errors a user can fix start with "ValueError: " and name the path and the
// fix. A missing token file gives an error that wraps os.ErrNotExist.
package token

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"simpler/internal/hostport"
	"simpler/kind"
)

// MinLen is the shortest token accepted, in bytes. The handshake's only
// exposure is an offline guess against the token, so it must be long.
const MinLen = 16

// MaxFileSize is the largest token file accepted, in bytes. A token is one
// short line; a bigger file is the wrong file.
const MaxFileSize = 4096

// makeOne is how the errors tell a user to make a token. Read checks the
// mode before the content, so a file that reaches a content check already
// has a private mode, and the shell's `>` keeps it.
const makeOne = "head -c 32 /dev/urandom | base64 > "

// Read reads the token in the file at path: its first line, surrounding
// space trimmed.
func Read(path string) ([]byte, error) {
	// O_NONBLOCK: opening a fifo for reading would otherwise wait for a
	// writer. The fstat below refuses it before any read. O_NOFOLLOW: a
	// symlink is refused, not followed, so that the checks below are of
	// the file named, not of whatever it points at.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("token file %s: %w", path, fs.ErrNotExist)
	}
	if errors.Is(err, syscall.ELOOP) {
		return nil, kind.Errorf(kind.ValueError, "token file %s is a symlink; point at the token file itself (a regular file of ours, mode 0600)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	if err := checkFile(path, fi); err != nil {
		return nil, err
	}
	// The limit holds even if the file grew after the fstat.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize))
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	return parse(path, data)
}

// checkFile refuses what must not be read as a token file, from its fstat.
// It checks the owner and the mode bits, not access(2): root can read
// anything, and a file of another user, however private, is not a token
// this user was given.
func checkFile(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return kind.Errorf(kind.ValueError, "token file %s is not a regular file (it is a %s); point at a file that holds the token",
			path, fileType(fi.Mode()))
	}
	if uid, ok := fileOwner(fi); ok && uid != euid() {
		return kind.Errorf(kind.ValueError, "token file %s is owned by uid %d, not by us (uid %d); a token file must be our own: make a copy we own (`install -m 600 %s FILE`) and point at it",
			path, uid, euid(), path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return kind.Errorf(kind.ValueError, "token file %s has mode %04o: group and others must have no access; run `chmod 600 %s`",
			path, perm, path)
	}
	if fi.Size() > MaxFileSize {
		return kind.Errorf(kind.ValueError, "token file %s is larger than the %d bytes allowed; it should hold only the token, on its first line",
			path, MaxFileSize)
	}
	return nil
}

// parse takes the token from the file's content: the first line, trimmed.
func parse(path string, data []byte) ([]byte, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		data = data[:i]
	}
	tok := bytes.TrimSpace(data)
	if len(tok) == 0 {
		return nil, kind.Errorf(kind.ValueError, "token file %s holds no token (its first line is empty); make one with `%s%s`",
			path, makeOne, path)
	}
	if len(tok) < MinLen {
		return nil, kind.Errorf(kind.ValueError, "the token in %s is shorter than the minimum of %d bytes; make a longer one with `%s%s`",
			path, MinLen, makeOne, path)
	}
	return tok, nil
}

// fileType names a file type for an error message.
func fileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "special file"
}

// Check refuses a token given directly (not from a file) that is shorter
// than MinLen bytes.
func Check(tok []byte) error {
	if len(tok) == 0 {
		return kind.Errorf(kind.ValueError, "the token is empty; use at least %d random bytes, e.g. from `head -c 32 /dev/urandom | base64`", MinLen)
	}
	if len(tok) < MinLen {
		return kind.Errorf(kind.ValueError, "the token is %d bytes, shorter than the minimum of %d; use a longer one, e.g. from `head -c 32 /dev/urandom | base64`",
			len(tok), MinLen)
	}
	return nil
}

// RuntimeDir is where a daemon writes the token it generates and where a
// client on the same host looks for it: $XDG_RUNTIME_DIR/simpler, or
// /tmp/simpler-<uid> without XDG_RUNTIME_DIR. It creates the directory
// (mode 0700) if missing and refuses one that is not private to us.
func RuntimeDir() (string, error) {
	xdg := os.Getenv("XDG_RUNTIME_DIR")
	dir := runtimeDirPath(xdg, euid())
	// Mkdir, not MkdirAll: XDG_RUNTIME_DIR is made by the login session,
	// and /tmp exists. A missing parent is a misconfiguration to report.
	err := os.Mkdir(dir, 0o700)
	switch {
	case err == nil:
		// The umask may have taken bits we need (it cannot add any).
		if err := os.Chmod(dir, 0o700); err != nil {
			return "", fmt.Errorf("runtime directory: %w", err)
		}
	case errors.Is(err, fs.ErrNotExist) && usesXDG(xdg):
		return "", kind.Errorf(kind.ValueError, "XDG_RUNTIME_DIR is %s, which does not exist; create it or unset XDG_RUNTIME_DIR", xdg)
	case !errors.Is(err, fs.ErrExist):
		return "", fmt.Errorf("runtime directory: %w", err)
	}
	// In /tmp another user may have made the directory first. Refusing
	// anything but our own private directory is what makes it safe: the
	// sticky bit of /tmp keeps others from replacing it afterwards.
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("runtime directory: %w", err)
	}
	if err := checkDir(dir, fi); err != nil {
		return "", err
	}
	return dir, nil
}

// usesXDG reports whether XDG_RUNTIME_DIR's value is used. The XDG base
// directory spec says to ignore a relative one.
func usesXDG(xdg string) bool { return xdg != "" && filepath.IsAbs(xdg) }

// runtimeDirPath computes RuntimeDir's path from XDG_RUNTIME_DIR's value
// and the uid. The fallback is /tmp itself, not $TMPDIR, so that a daemon
// and a client with different TMPDIRs still agree (tmux does the same).
func runtimeDirPath(xdg string, uid int) string {
	if usesXDG(xdg) {
		return filepath.Join(xdg, "simpler")
	}
	return filepath.Join("/tmp", "simpler-"+strconv.Itoa(uid))
}

// checkDir refuses a runtime directory that is not ours alone.
func checkDir(dir string, fi fs.FileInfo) error {
	if fi.Mode()&fs.ModeSymlink != 0 {
		return kind.Errorf(kind.ValueError, "runtime directory %s is a symlink; remove it (`rm %s`) and it will be made again", dir, dir)
	}
	if !fi.IsDir() {
		return kind.Errorf(kind.ValueError, "runtime directory %s is not a directory (it is a %s); remove it and it will be made again",
			dir, fileTypeOrRegular(fi.Mode()))
	}
	if uid, ok := owner(fi); ok && uid != euid() {
		return kind.Errorf(kind.ValueError, "runtime directory %s is owned by uid %d, not by us (uid %d); remove it, or set XDG_RUNTIME_DIR to a directory of our own",
			dir, uid, euid())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return kind.Errorf(kind.ValueError, "runtime directory %s has mode %04o: group and others must have no access; run `chmod 700 %s`",
			dir, perm, dir)
	}
	return nil
}

// fileTypeOrRegular is fileType, naming a regular file too.
func fileTypeOrRegular(m fs.FileMode) string {
	if m.IsRegular() {
		return "regular file"
	}
	return fileType(m)
}

// owner is the uid that owns a file, from its stat.
func owner(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// PathFor is the token file of a daemon listening on port:
// RuntimeDir()/remote-l3-worker-<port>.token.
func PathFor(port int) (string, error) {
	// Port 0 would be a daemon that has not bound yet: the file must be
	// named by the port it got.
	if port < 1 || port > 65535 {
		return "", kind.Errorf(kind.ValueError, "port %d is out of range 1-65535; name the token file by the port the daemon listens on", port)
	}
	dir, err := RuntimeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "remote-l3-worker-"+strconv.Itoa(port)+".token"), nil
}

// Generate makes a fresh token (32 bytes from crypto/rand, hex-encoded: 64
// characters) and writes it, with mode 0600, to PathFor(port). It returns
// the path and the token. The caller calls Remove(path) when it stops.
func Generate(port int) (path string, tok []byte, err error) {
	path, err = PathFor(port)
	if err != nil {
		return "", nil, err
	}
	return generateAt(path)
}

// GroupPathFor is the token file a level-4 worker makes for the ranks of
// a worker group it listens for on port (they are given its path):
// RuntimeDir()/worker-group-<port>.token.
func GroupPathFor(port int) (string, error) {
	p, err := PathFor(port)
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(p), "worker-group-"+strconv.Itoa(port)+".token"), nil
}

// GenerateGroup is Generate for GroupPathFor(port). The caller calls
// Remove(path) once its ranks have read it, or when it stops.
func GenerateGroup(port int) (path string, tok []byte, err error) {
	path, err = GroupPathFor(port)
	if err != nil {
		return "", nil, err
	}
	return generateAt(path)
}

// generateAt sweeps token files of dead writers, then makes a fresh token
// and writes it to path, replacing a stale file of ours, and holds the
// file's lock until Remove.
func generateAt(path string) (string, []byte, error) {
	if _, err := SweepStale(); err != nil {
		return "", nil, err
	}
	unlock, err := lockDir(filepath.Dir(path))
	if err != nil {
		return "", nil, err
	}
	defer unlock()
	if err := removeStale(path); err != nil {
		return "", nil, err
	}
	raw := make([]byte, 32)
	rand.Read(raw) // never fails: since Go 1.24 it crashes the program instead
	tok := []byte(hex.EncodeToString(raw))
	if err := write(path, tok); err != nil {
		return "", nil, err
	}
	return path, tok, nil
}

// held are the token files this process wrote and has not removed, open
// and locked: the lock says the writer lives.
var held = struct {
	sync.Mutex
	files map[string]*os.File
}{files: map[string]*os.File{}}

// hold keeps f, locked, as the file at path.
func hold(path string, f *os.File) {
	held.Lock()
	defer held.Unlock()
	if old := held.files[path]; old != nil {
		old.Close() // its file was replaced (removeStale)
	}
	held.files[path] = f
}

// release closes the file held for path, dropping its lock.
func release(path string) {
	held.Lock()
	defer held.Unlock()
	if f := held.files[path]; f != nil {
		f.Close()
		delete(held.files, path)
	}
}

// lockDir takes an exclusive lock on dir for the length of one write or
// sweep, waiting for another's to finish (each is short).
func lockDir(dir string) (unlock func(), err error) {
	d, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("runtime directory: %w", err)
	}
	for {
		err = unix.Flock(int(d.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("locking the runtime directory: %w", err)
	}
	return func() { d.Close() }, nil
}

// isTokenName reports whether name is one Generate or GenerateGroup
// writes: remote-l3-worker-<port>.token or worker-group-<port>.token.
func isTokenName(name string) bool {
	rest, ok := strings.CutSuffix(name, ".token")
	if !ok {
		return false
	}
	for _, prefix := range []string{"remote-l3-worker-", "worker-group-"} {
		if port, ok := strings.CutPrefix(rest, prefix); ok {
			n, err := strconv.Atoi(port)
			return err == nil && n >= 1 && n <= 65535 && strconv.Itoa(n) == port
		}
	}
	return false
}

// SweepStale removes the token files in RuntimeDir whose writer is
// provably dead: a regular file of ours, named as Generate or
// GenerateGroup name them, whose lock it can take. A file whose lock is
// held, or that it cannot open, check or lock, is left alone. It returns
// the paths removed.
func SweepStale() ([]string, error) {
	dir, err := RuntimeDir()
	if err != nil {
		return nil, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("runtime directory: %w", err)
	}
	var removed []string
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if isTokenName(e.Name()) && writerDead(path) && os.Remove(path) == nil {
			removed = append(removed, path)
		}
	}
	return removed, nil
}

// writerDead reports whether the token file at path is a regular file of
// ours whose lock nobody holds: its writer is gone. (The directory lock
// is held, so the file cannot be replaced before the caller removes it.)
func writerDead(path string) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer f.Close() // drops the lock taken below
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	if uid, ok := fileOwner(fi); !ok || uid != euid() {
		return false
	}
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
}

// removeStale removes a token file left by a daemon that did not clean up.
// The port is ours now (the caller has bound it), so the file is stale. It
// removes only a regular file of ours; anything else was not made by
// Generate and is left for a person to look at.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return kind.Errorf(kind.ValueError, "%s exists and is not a regular file (it is a %s); remove it by hand", path, fileType(fi.Mode()))
	}
	if uid, ok := fileOwner(fi); ok && uid != euid() {
		return kind.Errorf(kind.ValueError, "%s exists and is owned by uid %d, not by us (uid %d); remove it by hand", path, uid, euid())
	}
	// Nobody else can swap the file between the Lstat and the Remove: the
	// directory is ours, mode 0700 (RuntimeDir checked it).
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("removing a stale token file: %w", err)
	}
	return nil
}

// write creates the token file, locked, and holds it. O_EXCL|O_NOFOLLOW:
// it never writes through a symlink or into a file someone else made.
// O_CLOEXEC: no child process inherits the lock.
func write(path string, tok []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) // a new file: nobody else has it
	if err == nil {
		_, err = f.WriteString(string(tok) + "\n")
	}
	if err != nil {
		f.Close()
		os.Remove(path) // a partial token is worse than none
		return fmt.Errorf("writing token file %s: %w", path, err)
	}
	hold(path, f)
	return nil
}

// Remove removes a token file that Generate wrote and drops its lock. One
// already gone is not an error: there is nothing left to clean up.
func Remove(path string) error {
	err := os.Remove(path)
	release(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// ForEndpoint finds the token of a daemon at endpoint (host:port) on this
// host, in the file that Generate wrote for that port. A daemon on another
// host has its token there, not here.
func ForEndpoint(endpoint string) ([]byte, error) {
	host, portText, err := hostport.Split(endpoint)
	if err != nil {
		return nil, kind.Errorf(kind.ValueError, "endpoint %q is not host:port", endpoint)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, kind.Errorf(kind.ValueError, "endpoint %q has port %q, which is not a number", endpoint, portText)
	}
	if !isLoopback(host) {
		return nil, kind.Errorf(kind.ValueError, "no token for %s: a daemon on another host keeps its token on that host; pass the token explicitly", endpoint)
	}
	path, err := PathFor(port)
	if err != nil {
		return nil, err
	}
	tok, err := Read(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no token for %s: looked in %s: %w; is a daemon running on port %d? It prints the path of the token file it writes when it starts; or pass the token explicitly",
			endpoint, path, fs.ErrNotExist, port)
	}
	return tok, err
}

// IsLoopback reports whether host names this host's loopback interface.
// It does not resolve names: only "localhost" itself counts.
func IsLoopback(host string) bool { return isLoopback(host) }

// isLoopback is IsLoopback.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	// netip, not net: the engine checks tokens and links no network
	// stack. (net.ParseIP takes no zone.)
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Zone() == "" && ip.IsLoopback()
}

// fileOwner is owner, for the token file itself (a variable for the same
// reason as euid).
var fileOwner = owner

// euid is the user the files must belong to (a variable so tests can
// pretend to be another user without root).
var euid = os.Geteuid
