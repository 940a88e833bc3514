package shm

import (
	"errors"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// SweepDead removes objects left by simpler processes that no longer exist
// (a crash or a kill skips their cleanup). Every name carries its creator's
// pid, "simpler-<pid>-...", so an object whose pid is gone can have no
// owner; one whose pid is alive, even if reused by another program, is
// left alone. Call it when the process starts: objects under this
// process's own pid then belong to an earlier process that had the same
// pid, and are removed too (else a new object of the same name would
// collide with them). It returns the names removed.
func SweepDead() ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, e := range entries {
		pid, ok := creator(e.Name())
		if !ok || pid != os.Getpid() && alive(pid) {
			continue
		}
		if err := os.Remove(dir + "/" + e.Name()); err == nil {
			removed = append(removed, e.Name())
		}
	}
	return removed, nil
}

// creator parses the pid out of "simpler-<pid>-...".
func creator(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "simpler-")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(num)
	return pid, err == nil && pid > 0
}

// alive reports whether pid exists (EPERM means it does, owned by someone
// else).
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// RemoveOwn removes every object this process created that is still
// named: the last act of a process that must exit without its usual
// cleanup.
func RemoveOwn() {
	names, _ := Leftovers(Prefix())
	for _, n := range names {
		os.Remove(dir + "/" + n)
	}
}
