package proc

// What a chip process that died leaves in /dev/shm. A child names its
// objects under its parent's prefix (so that the parent can find them),
// and a child that is killed (a kernel that would not stop) cannot remove
// them: its domain ranks' windows, and the windows it kept for reuse.
// The parent removes them: the pool when the process is reaped, a rank's
// window when its domain is freed.

import (
	"errors"
	"io/fs"
	"os"
	"strconv"

	"simpler/hal/comm"
	"simpler/hal/shm"
)

// shmDir is where POSIX shared-memory objects live on Linux.
const shmDir = "/dev/shm/"

// removeNames removes the objects whose names start with stem and whose
// rest keep accepts; names already gone are no error.
func removeNames(stem string, keep func(rest string) bool) error {
	names, err := shm.Leftovers(stem)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		if !keep(name[len(stem):]) {
			continue
		}
		if err := os.Remove(shmDir + name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removePool removes the windows child process pid kept for reuse
// (comm's pool, "<prefix>dompool-<pid>-<n>"): only it used them.
func removePool(prefix string, pid int) error {
	return removeNames(prefix+"dompool-"+strconv.Itoa(pid)+"-", func(string) bool { return true })
}

// removeDomainRank removes the window of rank of the domain req
// allocated, made by a process that is gone ("<prefix>dom-<namespace>-
// <allocation>-r<rank>", and rank 0's header, "...-hdr").
func removeDomainRank(prefix string, req comm.Request, rank int) error {
	stem := prefix + "dom-" + req.Namespace + "-" + strconv.FormatUint(req.AllocationID, 10) + "-"
	return removeNames(stem, func(rest string) bool {
		return rest == "r"+strconv.Itoa(rank) || rank == 0 && rest == "hdr"
	})
}

// gone reports whether the incarnation's process has been reaped.
func (in *incarnation) gone() bool {
	select {
	case <-in.exited:
		return true
	default:
		return false
	}
}
