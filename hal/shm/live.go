package shm

// The lock that says a prefix's objects are in use.
//
// Every process that creates objects under a prefix holds a shared flock
// on the prefix's lock object, "<prefix>live", from its first object on:
// taken before the object's name exists, kept until Finish or exit. The
// kernel drops the lock when the process ends, however it ends, so a
// prefix whose lock can be taken exclusively has no live process that can
// still create, use or remove its objects: they are proven dead (the
// sweep, sweep.go). Processes that share a prefix (ChildEnv) each hold the
// lock themselves. One lock per process, taken once, keeps it off the
// path of every object.
//
// The lock object is removed only by whoever holds it exclusively (Finish,
// the sweep), and a process that waited for the lock checks afterwards
// that the name still holds the object it locked, so no process ever
// holds a lock that the name no longer shows.

import (
	"errors"
	"sync"

	"golang.org/x/sys/unix"

	"simpler/kind"
)

const lockTag = "live"

// lockName is the lock object of prefix p.
func lockName(p string) string { return p + lockTag }

// LockName is the lock object of the prefix p (tests look for it).
func LockName(p string) string { return lockName(p) }

// live is this process's hold on its prefix's lock, and the objects it
// created that still have their names.
var live = struct {
	mu      sync.Mutex
	fd      int // the lock object, locked shared; -1 when not held
	pending int // creates between hold and own
	owned   map[*Segment]bool
}{fd: -1, owned: map[*Segment]bool{}}

// hold takes the prefix's lock if this process does not hold it yet, and
// counts a create in progress until own or unhold.
func hold() error {
	live.mu.Lock()
	defer live.mu.Unlock()
	if live.fd < 0 {
		fd, err := lockShared(prefix)
		if err != nil {
			return err
		}
		live.fd = fd
	}
	live.pending++
	return nil
}

// unhold ends a create that made nothing.
func unhold() {
	live.mu.Lock()
	live.pending--
	live.mu.Unlock()
}

// own ends a create that made s.
func own(s *Segment) {
	live.mu.Lock()
	live.pending--
	live.owned[s] = true
	live.mu.Unlock()
}

// disown forgets s, whose name is gone.
func disown(s *Segment) {
	live.mu.Lock()
	delete(live.owned, s)
	live.mu.Unlock()
}

// Owned lists the names of the objects this process created that still
// have them: its own leftovers, where the prefix's are shared with other
// processes.
func Owned() []string {
	live.mu.Lock()
	segs := make([]*Segment, 0, len(live.owned))
	for s := range live.owned {
		segs = append(segs, s)
	}
	live.mu.Unlock()
	var names []string
	for _, s := range segs {
		s.mu.Lock()
		names = append(names, s.Name)
		s.mu.Unlock()
	}
	return names
}

// lockShared opens (creating it if need be) the lock object of p and
// locks it shared. The object must be ours, like any object opened. A
// process holding it exclusively is removing it; once it is done, the
// name holds another object or none, and this starts again.
func lockShared(p string) (int, error) {
	name := lockName(p)
	path := dir + "/" + name
	for tries := 0; tries < 100; tries++ {
		fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		created := err == nil
		if created {
			err = unix.Fchmod(fd, 0o600) // the umask may have taken bits away
		} else if errors.Is(err, unix.EEXIST) {
			fd, _, err = openChecked(name)
			if errors.Is(err, unix.ENOENT) {
				continue // removed between the two opens
			}
		}
		if err == nil {
			err = flock(fd, unix.LOCK_SH)
		}
		if err != nil {
			if created {
				unix.Unlink(path) // a refusal leaves nothing behind
			}
			if fd >= 0 {
				unix.Close(fd)
			}
			return -1, kind.Errorf(kind.RuntimeError, "shm: the lock of %s: %w", p, err)
		}
		if named(fd, path) {
			return fd, nil
		}
		unix.Close(fd)
	}
	return -1, kind.Errorf(kind.RuntimeError, "shm: the lock of %s keeps being removed", p)
}

// flock is unix.Flock retried when a signal interrupts it.
func flock(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// named reports whether path names the object open as fd.
func named(fd int, path string) bool {
	var a, b unix.Stat_t
	return unix.Fstat(fd, &a) == nil && unix.Lstat(path, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
}

// ChildEnv takes this process's lock (so that its prefix stays proven
// alive for as long as it lives) and returns the environment entry,
// PrefixEnv=Prefix(), under which a process it starts shares the prefix.
func ChildEnv() (string, error) {
	if err := hold(); err != nil {
		return "", err
	}
	unhold()
	return PrefixEnv + "=" + prefix, nil
}

// Finish drops this process's hold on its prefix's lock if it has no
// named object left; if no other process holds the lock either, it
// removes what dead processes of the prefix left and then the lock (as
// the sweep would): the last act of a clean exit, after which nothing of
// the prefix is left. A Create after it takes the lock again.
func Finish() {
	live.mu.Lock()
	defer live.mu.Unlock()
	if live.fd < 0 || live.pending > 0 || len(live.owned) > 0 {
		return
	}
	// A failed conversion drops the shared lock too; this process has no
	// names to keep alive, so that is what it wants anyway. Removing the
	// lock without what processes killed under the prefix left would
	// leave those for good: without a lock, nothing proves them dead.
	if unix.Flock(live.fd, unix.LOCK_EX|unix.LOCK_NB) == nil && named(live.fd, dir+"/"+lockName(prefix)) {
		removeDead(prefix)
	}
	unix.Close(live.fd)
	live.fd = -1
}

// RemoveOwn removes the name of every object this process created that
// still has one, and then its lock (Finish): the last act of a process
// that must exit without its usual cleanup. Objects of other processes
// that share the prefix are theirs to remove.
func RemoveOwn() {
	live.mu.Lock()
	segs := make([]*Segment, 0, len(live.owned))
	for s := range live.owned {
		segs = append(segs, s)
	}
	live.mu.Unlock()
	for _, s := range segs {
		s.Unlink()
	}
	Finish()
}
