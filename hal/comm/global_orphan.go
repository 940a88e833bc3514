package comm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"simpler/hal/shm"
	"simpler/kind"
)

// RemoveGlobalRank removes the names a rank of a global domain made under
// prefix, for a rank whose process died before it could release them (a
// node whose chips are processes prepares each rank in its chip's
// process, under the node's prefix, and only the node is left to clean
// up): the rank's window, "<prefix>gdom-<id>-<generation>-<key>-r<rank>",
// and for rank 0 the domain's header. The key is random and the dead
// process never reported it (it may have died inside PrepareGlobal), so
// every name of that shape goes; prefix must therefore be one that no
// other preparer of the same domain id, generation and rank uses.
// Processes that still map the objects keep their mappings. Names that do
// not exist are no error.
func RemoveGlobalRank(prefix string, domainID, generation uint64, rank int) error {
	if !goodPrefix(prefix) {
		return kind.Errorf(kind.ValueError, "comm: removing a global rank: name prefix %q must start with \"simpler-\" and contain no \"/\"", prefix)
	}
	stem := prefix + globalStem(domainID, generation)
	names, err := shm.Leftovers(stem)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		if !orphanOf(name[len(stem):], rank) {
			continue
		}
		if err := unix.Unlink(shmDir + name); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("comm: removing %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// orphanOf reports whether rest, a name after its domain's stem, is
// "<key>-r<rank>" or, for rank 0, "<key>-hdr".
func orphanOf(rest string, rank int) bool {
	key, tail, ok := strings.Cut(rest, "-")
	if !ok || len(key) != globalKeyLen || strings.Trim(key, "0123456789abcdef") != "" {
		return false
	}
	return tail == "r"+strconv.Itoa(rank) || rank == 0 && tail == "hdr"
}
