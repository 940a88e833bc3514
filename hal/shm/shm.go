// Package shm creates and maps POSIX shared-memory objects, so that memory
// written by this process can be mapped by another (a child worker) at its
// own address.
//
// Objects are files in /dev/shm named "simpler-<pid>-...", created
// exclusively with mode 0600 and mapped shared read/write; the descriptor is
// closed once mapped. A Segment that created its object unlinks it on
// Close, so a clean exit leaves nothing behind; Leftovers lets tests prove
// that.
//
// Every open is checked, because /dev/shm is writable by every user: it
// never follows a symlink (O_NOFOLLOW), and the object must be a regular
// file owned by this process's effective uid with mode 0600 exactly. So a
// name, even one that reached this process from another, can only ever
// map an object this user made for simpler, never a file a symlink points
// at or another user's object (ErrNotOurs).
package shm

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dir is where POSIX shared-memory objects live on Linux.
const dir = "/dev/shm"

const namePrefix = "simpler-"

var (
	prefix  = namePrefix + strconv.Itoa(os.Getpid()) + "-"
	counter atomic.Uint64
)

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
// "simpler-<pid>-".
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
}

// Create makes a fresh object named Prefix()+tag+"-"+n, n unique in this
// process, of size bytes, zeroed.
func Create(tag string, size int) (*Segment, error) {
	if tag == "" || strings.ContainsRune(tag, '/') {
		return nil, fmt.Errorf("shm: bad tag %q", tag)
	}
	return create(prefix+tag+"-"+strconv.FormatUint(counter.Add(1), 10), size)
}

// CreateNamed makes an object with exactly this name; it must start with
// "simpler-" (so Leftovers-style cleanup can find it) and must not exist.
func CreateNamed(name string, size int) (*Segment, error) {
	if !strings.HasPrefix(name, namePrefix) {
		return nil, fmt.Errorf("shm: object name %q must start with %q", name, namePrefix)
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
	if err := checkName(name); err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, fmt.Errorf("shm: create %s: size must be > 0, got %d", name, size)
	}
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
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("map", err)
	}
	return &Segment{Name: name, Mem: mem, owner: true, dev: st.Dev, ino: st.Ino}, nil
}

// Open maps the first size bytes of an existing object. The Segment does
// not own the name: Close only unmaps.
func Open(name string, size int) (*Segment, error) {
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
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: map %s: %w", name, err)
	}
	return &Segment{Name: name, Mem: mem, dev: st.Dev, ino: st.Ino}, nil
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

// Addr is the address of Mem[0] in this process.
func (s *Segment) Addr() uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(s.Mem)))) }

// Close unmaps the segment and, if this Segment created the object and it
// is still named, unlinks it. Calling Close again does nothing. Mem must
// not be used afterwards.
func (s *Segment) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var first error
	if err := unix.Munmap(s.Mem); err != nil {
		first = fmt.Errorf("shm: unmap %s: %w", s.Name, err)
	}
	if s.owner && !s.unlinked {
		s.unlinked = true
		if err := unix.Unlink(dir + "/" + s.Name); err != nil && first == nil {
			first = fmt.Errorf("shm: unlink %s: %w", s.Name, err)
		}
	}
	return first
}

// Unlink removes the object's name now; existing mappings stay valid, and
// no new Open can find it. A second Unlink of the same Segment is a no-op.
func (s *Segment) Unlink() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unlinked {
		return nil
	}
	if err := unix.Unlink(dir + "/" + s.Name); err != nil {
		return fmt.Errorf("shm: unlink %s: %w", s.Name, err)
	}
	s.unlinked = true
	return nil
}

// Leftovers lists the objects in /dev/shm whose names start with prefix.
func Leftovers(prefix string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
