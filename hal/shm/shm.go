// Package shm creates and maps POSIX shared-memory objects, so that memory
// written by this process can be mapped by another (a child worker) at its
// own address.
//
// Objects are files in /dev/shm named "simpler-<prefix key>-...",
// created exclusively with mode 0600 and mapped shared read/write; the
// descriptor is closed once mapped. A Segment that created its object
// unlinks it on Close, so a clean exit leaves nothing behind; Leftovers
// lets tests prove that.
//
// Names are unpredictable, so that no other user can squat the name an
// object is about to take: the process's prefix carries 64 random bits
// (not its pid), and every name Create makes carries 64 random bits of its
// own (not a counter). A name several processes must derive (CreateNamed)
// is the caller's to make unpredictable.
//
// Every object's pages are reserved when it is made (fallocate), so a
// full /dev/shm is a RuntimeError at Create naming the size asked and the
// space left, never a SIGBUS at a later store into the mapping. The cost
// is the page allocation a first touch would have made, paid up front:
// about 2 ms for a 4 MiB object, tens of microseconds for a small one
// (BenchmarkCreateClose).
//
// Every open is checked, because /dev/shm is writable by every user: it
// never follows a symlink (O_NOFOLLOW), and the object must be a regular
// file owned by this process's effective uid with mode 0600 exactly. So a
// name, even one that reached this process from another, can only ever
// map an object this user made for simpler, never a file a symlink points
// at or another user's object (ErrNotOurs).
//
// Liveness is a lock, not a pid: every process that creates objects under
// a prefix holds a shared flock on the prefix's lock object for as long
// as it may have any, and the sweep (SweepDead) removes a prefix's objects
// only when it can take that lock exclusively. A lock works across pid
// namespaces that share /dev/shm, where a pid means nothing (live.go).
package shm

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"simpler/internal/lockorder"
	"simpler/kind"
)

// dir is where POSIX shared-memory objects live on Linux.
const dir = "/dev/shm"

const namePrefix = "simpler-"

// PrefixEnv names the environment variable through which a process hands
// its prefix to the processes it starts (ChildEnv): a process that finds
// a well-formed prefix there takes it as its own, so that its objects are
// found (and kept alive) with its parent's.
const PrefixEnv = "SIMPLER_SHM_PREFIX"

// keyBytes is the random part of a prefix and of a name Create makes:
// 64 bits, 16 hex digits.
const keyBytes = 8

var prefix = startPrefix()

// startPrefix is the inherited prefix if there is a well-formed one, else
// a fresh one.
func startPrefix() string {
	if p := os.Getenv(PrefixEnv); ValidPrefix(p) {
		return p
	}
	return NewPrefix()
}

// NewPrefix draws a fresh prefix, "simpler-<16 hex digits>-" (for a test
// that starts a process under a prefix of its own).
func NewPrefix() string { return namePrefix + randomKey() + "-" }

// ValidPrefix reports whether p has the form NewPrefix makes.
func ValidPrefix(p string) bool {
	key, ok := strings.CutPrefix(p, namePrefix)
	if !ok || len(key) != 2*keyBytes+1 || key[2*keyBytes] != '-' {
		return false
	}
	for _, c := range key[:2*keyBytes] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// randomKey is 64 random bits in lowercase hex.
func randomKey() string {
	var b [keyBytes]byte
	rand.Read(b[:]) // crypto/rand does not fail on Linux
	return hex.EncodeToString(b[:])
}

// ErrTooSmall is wrapped by Open's error for an object smaller than asked:
// one its creator has not sized yet, or the wrong object.
var ErrTooSmall = errors.New("object smaller than asked")

// euid is the user every object must belong to (a variable so that tests
// can stand in for another user without root).
var euid = os.Geteuid

// ErrNotOurs is wrapped by the error for an object that is not a regular
// file owned by this user with mode 0600, or is a symlink.
var ErrNotOurs = errors.New("not a shared-memory object of this user")

// Prefix is the first part of every object name this process creates:
// "simpler-<16 random hex digits>-", inherited from PrefixEnv or drawn at
// start.
func Prefix() string { return prefix }

// Segment is one mapped shared-memory object.
type Segment struct {
	Name string
	Mem  []byte

	mu       sync.Mutex
	owner    bool // created here: Close unlinks
	unlinked bool
	closed   bool
	dev, ino uint64 // the object's identity, so Reopen finds this one only
	placed   bool   // mapped where PlaceDeterministically's counter said (place.go)
}

// Create makes a fresh object named Prefix()+tag+"-"+<16 random hex
// digits>, of size bytes, zeroed. Nobody can tell the name before it
// exists, so nobody can take it first.
func Create(tag string, size int) (*Segment, error) {
	if tag == "" || strings.ContainsRune(tag, '/') {
		return nil, fmt.Errorf("shm: bad tag %q", tag)
	}
	for tries := 0; ; tries++ {
		s, err := create(prefix+tag+"-"+randomKey(), size)
		// 64 random bits do not collide by chance; only a name taken
		// already is worth another draw, and only a few.
		if !errors.Is(err, unix.EEXIST) || tries == 3 {
			return s, err
		}
	}
}

// CreateNamed makes an object with exactly this name, which must not
// exist. It must start with Prefix(), so that this process's lock keeps it
// alive in the sweep's eyes (live.go); the rest is the caller's to make
// unpredictable.
func CreateNamed(name string, size int) (*Segment, error) {
	if !strings.HasPrefix(name, prefix) {
		return nil, kind.Errorf(kind.ValueError, "shm: object name %q must start with this process's prefix %q", name, prefix)
	}
	if name == lockName(prefix) {
		return nil, kind.Errorf(kind.ValueError, "shm: object name %q is the prefix's lock", name)
	}
	return create(name, size)
}

func checkName(name string) error {
	if name == "" || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return fmt.Errorf("shm: bad object name %q", name)
	}
	return nil
}

func create(name string, size int) (*Segment, error) {
	lockorder.IO("creating a shared-memory object")
	if err := checkName(name); err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, fmt.Errorf("shm: create %s: size must be > 0, got %d", name, size)
	}
	// The lock first: from the moment the name exists, the sweep must
	// find its prefix alive.
	if err := hold(); err != nil {
		return nil, err
	}
	s, err := createHeld(name, size)
	if err != nil {
		unhold()
		return nil, err
	}
	own(s)
	return s, nil
}

func createHeld(name string, size int) (*Segment, error) {
	path := dir + "/" + name
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("shm: create %s: %w", name, err)
	}
	defer unix.Close(fd)
	fail := func(what string, err error) (*Segment, error) {
		unix.Unlink(path) // a half-made object must not leak
		return nil, fmt.Errorf("shm: %s %s: %w", what, name, err)
	}
	// The umask may have taken bits away; opens insist on exactly 0600.
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return fail("chmod", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail("stat", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail("truncate", err)
	}
	if err := reserve(fd, size); err != nil {
		unix.Unlink(path)
		return nil, err
	}
	mem, placed, err := mapObject(fd, size)
	if err != nil {
		return fail("map", err)
	}
	s := &Segment{Name: name, Mem: mem, owner: true, dev: st.Dev, ino: st.Ino, placed: placed}
	s.listMapping()
	return s, nil
}

// reserve takes the object's pages from the device now. A tmpfs object
// is sparse: without this, a full /dev/shm is noticed only when a page is
// first touched, as a SIGBUS at whatever store touched it (a kernel's
// output, a host tensor's fill). fallocate allocates the pages without
// writing them, so a full device is an error here, naming the size asked
// and the space left.
func reserve(fd, size int) error {
	err := unix.Fallocate(fd, 0, 0, int64(size))
	for errors.Is(err, unix.EINTR) {
		err = unix.Fallocate(fd, 0, 0, int64(size))
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.ENOMEM):
		return kind.Errorf(kind.RuntimeError, "shm: %s has no room for %d bytes of shared memory (%d bytes left): %w", dir, size, spaceLeft(), err)
	case errors.Is(err, unix.EOPNOTSUPP):
		// Not tmpfs: a file system without fallocate. Nothing to reserve
		// with; the object is usable, only not reserved.
		return nil
	}
	return kind.Errorf(kind.RuntimeError, "shm: reserve %d bytes of shared memory: %w", size, err)
}

// spaceLeft is the bytes /dev/shm has free now, or -1 if it
// cannot be read.
func spaceLeft() int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * st.Bsize
}

// Open maps the first size bytes of an existing object. The Segment does
// not own the name: Close only unmaps.
func Open(name string, size int) (*Segment, error) {
	lockorder.IO("opening a shared-memory object")
	if err := checkName(name); err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, fmt.Errorf("shm: open %s: size must be > 0, got %d", name, size)
	}
	fd, st, err := openChecked(name)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return mapChecked(fd, st, name, size)
}

// OpenFD maps a whole object from a descriptor another process passed
// (SCM_RIGHTS), with the same checks as Open; name is for messages. The
// caller keeps fd and closes it.
func OpenFD(fd int, name string) (*Segment, error) {
	lockorder.IO("mapping a shared-memory object")
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: stat %s: %w", name, err)
	}
	if err := checkStat(&st, name); err != nil {
		return nil, err
	}
	if st.Size <= 0 || st.Size > int64(^uint(0)>>1) {
		return nil, fmt.Errorf("shm: open %s: the object has %d bytes", name, st.Size)
	}
	return mapChecked(fd, st, name, int(st.Size))
}

// openChecked opens an existing object read/write without following a
// symlink and checks it is one of ours.
func openChecked(name string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := unix.Open(dir+"/"+name, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, unix.ELOOP):
		return -1, st, fmt.Errorf("shm: open %s: a symlink: %w", name, ErrNotOurs)
	case errors.Is(err, unix.EISDIR):
		return -1, st, fmt.Errorf("shm: open %s: a directory: %w", name, ErrNotOurs)
	}
	if err != nil {
		return -1, st, fmt.Errorf("shm: open %s: %w", name, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, fmt.Errorf("shm: stat %s: %w", name, err)
	}
	if err := checkStat(&st, name); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}

// checkStat accepts a regular file of this effective uid with mode 0600.
func checkStat(st *unix.Stat_t, name string) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("shm: open %s: not a regular file (mode %#o): %w", name, st.Mode, ErrNotOurs)
	case int(st.Uid) != euid():
		return fmt.Errorf("shm: open %s: owned by uid %d, this process is uid %d: %w", name, st.Uid, euid(), ErrNotOurs)
	case st.Mode&0o7777 != 0o600:
		return fmt.Errorf("shm: open %s: mode %#o, want 0600: %w", name, st.Mode&0o7777, ErrNotOurs)
	}
	return nil
}

func mapChecked(fd int, st unix.Stat_t, name string, size int) (*Segment, error) {
	// Mapping past the object's end would succeed but fault on touch.
	if int64(size) > st.Size {
		return nil, fmt.Errorf("shm: open %s: want %d bytes but the object has %d: %w", name, size, st.Size, ErrTooSmall)
	}
	mem, placed, err := mapObject(fd, size)
	if err != nil {
		return nil, fmt.Errorf("shm: map %s: %w", name, err)
	}
	s := &Segment{Name: name, Mem: mem, dev: st.Dev, ino: st.Ino, placed: placed}
	s.listMapping()
	return s, nil
}

// Reopen returns a new descriptor of the object behind s, which this
// process created and still names, for passing to another process. It
// refuses a name that now holds another object.
func (s *Segment) Reopen() (int, error) {
	s.mu.Lock()
	gone := s.closed || s.unlinked || !s.owner
	s.mu.Unlock()
	if gone {
		return -1, fmt.Errorf("shm: reopen %s: not a live object of this process", s.Name)
	}
	fd, st, err := openChecked(s.Name)
	if err != nil {
		return -1, err
	}
	if st.Dev != s.dev || st.Ino != s.ino {
		unix.Close(fd)
		return -1, fmt.Errorf("shm: reopen %s: the name holds another object: %w", s.Name, ErrNotOurs)
	}
	return fd, nil
}

// Named reports whether s's name still names the object s maps: its
// creator has neither unlinked it nor put another object in its place.
func (s *Segment) Named() bool {
	var st unix.Stat_t
	if err := unix.Fstatat(unix.AT_FDCWD, dir+"/"+s.Name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false
	}
	return st.Dev == s.dev && st.Ino == s.ino
}

// Addr is the address of Mem[0] in this process.
func (s *Segment) Addr() uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(s.Mem)))) }

// Close unmaps the segment and, if this Segment created the object and it
// is still named, unlinks it. Calling Close again does nothing. Mem must
// not be used afterwards.
func (s *Segment) Close() error {
	lockorder.IO("unmapping a shared-memory object")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var first error
	s.unlistMapping()
	if err := unmapObject(s.Mem, s.placed); err != nil {
		first = fmt.Errorf("shm: unmap %s: %w", s.Name, err)
	}
	if s.owner && !s.unlinked {
		s.unlinked = true
		if err := unix.Unlink(dir + "/" + s.Name); err != nil && first == nil {
			first = fmt.Errorf("shm: unlink %s: %w", s.Name, err)
		}
		disown(s)
	}
	return first
}

// Unlink removes the object's name now; existing mappings stay valid, and
// no new Open can find it. A second Unlink of the same Segment is a no-op.
func (s *Segment) Unlink() error {
	lockorder.IO("unlinking a shared-memory object")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unlinked {
		return nil
	}
	if err := unix.Unlink(dir + "/" + s.Name); err != nil {
		return fmt.Errorf("shm: unlink %s: %w", s.Name, err)
	}
	s.unlinked = true
	if s.owner {
		disown(s)
	}
	return nil
}

// Rename moves the object s created to the name to, which must not exist
// and must start with Prefix(), like any name this process creates; Name
// follows. (A pool keeps an object under a name of its own between uses.)
func (s *Segment) Rename(to string) error {
	lockorder.IO("renaming a shared-memory object")
	if err := checkName(to); err != nil {
		return err
	}
	if !strings.HasPrefix(to, prefix) || to == lockName(prefix) {
		return kind.Errorf(kind.ValueError, "shm: rename %s to %s: not a name of this process's prefix %q", s.Name, to, prefix)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.owner || s.unlinked || s.closed {
		return kind.Errorf(kind.RuntimeError, "shm: rename %s: not a live object of this process", s.Name)
	}
	from, target := dir+"/"+s.Name, dir+"/"+to
	// RENAME_NOREPLACE: a plain rename would silently replace an object
	// that has the name already.
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, target, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		// A kernel or file system without RENAME_NOREPLACE: check, then
		// rename. Losing a race here needs two creators of one name.
		if _, serr := os.Lstat(target); serr == nil {
			err = unix.EEXIST
		} else {
			err = os.Rename(from, target)
		}
	}
	if err != nil {
		return kind.Errorf(kind.RuntimeError, "shm: rename %s to %s: %w", s.Name, to, err)
	}
	s.Name = to
	return nil
}

// Leftovers lists the objects in /dev/shm whose names start with prefix;
// a prefix's lock object (live.go) is not an object and is not listed.
func Leftovers(prefix string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	var out []string
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, prefix) && !isLock(n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// isLock reports whether name is the lock object of a prefix.
func isLock(name string) bool {
	p, ok := strings.CutSuffix(name, lockTag)
	return ok && ValidPrefix(p)
}
