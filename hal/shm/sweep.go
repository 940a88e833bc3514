package shm

import (
	"os"

	"golang.org/x/sys/unix"
)

// SweepDead removes objects left by simpler processes that no longer exist
// (a crash or a kill skips their cleanup), and returns the names removed.
//
// A pid proves nothing where processes of several pid namespaces share
// /dev/shm, so liveness is the prefix's lock (live.go): the objects of a
// prefix are removed only when this process can take its lock object
// exclusively, which no process that may still use them lets it do. Then,
// holding it, SweepDead lists the prefix again (no process can create
// under it meanwhile), removes those objects and the lock object last.
// Whatever it cannot prove dead it leaves alone: a prefix without a lock
// object, a lock held, names in the old "simpler-<pid>-" form, objects
// and locks of other users.
func SweepDead() ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	seen := map[string]bool{}
	for _, e := range entries {
		p, ok := prefixOf(e.Name())
		if !ok || seen[p] {
			continue
		}
		seen[p] = true
		removed = append(removed, sweepPrefix(p)...)
	}
	return removed, nil
}

// prefixOf returns the prefix of a name of the form NewPrefix makes.
func prefixOf(name string) (string, bool) {
	n := len(namePrefix) + 2*keyBytes + 1
	if len(name) < n || !ValidPrefix(name[:n]) {
		return "", false
	}
	return name[:n], true
}

// SweepPrefix is SweepDead for the one prefix p: it removes p's objects
// and then its lock object if no process holds the lock, and returns the
// names removed. (A test ends a process it started under a prefix of its
// own with it.)
func SweepPrefix(p string) []string {
	if !ValidPrefix(p) {
		return nil
	}
	return sweepPrefix(p)
}

// sweepPrefix removes the objects of prefix p and its lock object if it
// can take the lock exclusively; it returns the names removed.
func sweepPrefix(p string) []string {
	name := lockName(p)
	fd, _, err := openChecked(name)
	if err != nil {
		return nil // no lock object, or not ours: nothing is proven
	}
	defer unix.Close(fd)
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil || !named(fd, dir+"/"+name) {
		return nil // alive, or the lock was replaced while we opened it
	}
	return removeDead(p)
}

// removeDead removes the objects of prefix p and then its lock object; the
// caller holds the lock exclusively, so they are dead and no process can
// create under p meanwhile. It returns the names removed.
func removeDead(p string) []string {
	name := lockName(p)
	names, err := Leftovers(p)
	if err != nil {
		return nil
	}
	var removed []string
	for _, n := range names {
		// Another user may have put a name under this prefix: theirs,
		// not a leftover of ours.
		if ours(n) && unix.Unlink(dir+"/"+n) == nil {
			removed = append(removed, n)
		}
	}
	if unix.Unlink(dir+"/"+name) == nil {
		removed = append(removed, name)
	}
	return removed
}

// ours reports whether name is a regular file of this user, not followed
// if a symlink.
func ours(name string) bool {
	var st unix.Stat_t
	return unix.Lstat(dir+"/"+name, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && int(st.Uid) == euid()
}
