package comm

// The allocation barrier: how the ranks of one allocation find each other
// through the header object, and how they give up together.

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"simpler/internal/futex"
	"simpler/kind"
)

// openHeader opens the allocation's header, creating it if no rank has.
// Waiting covers a creator in another process between creating and
// sizing the object.
func (r *Rank) openHeader(deadline time.Time) error {
	name := r.req.headerName()
	o, created, err := awaitObject(r.req.prefix(), name, headerSize(r.Size), true, deadline)
	if errors.Is(err, errNotReady) {
		return r.core.errorf(kind.TimeoutError, "waited %v for the header %s to be created", r.req.Timeout, name)
	} else if err != nil {
		return r.core.errorf(kind.RuntimeError, "header: %v", err)
	}
	r.core.hdr, r.core.hdrOwned = o, created
	return nil
}

// join is the allocation barrier: count this rank in and wait for all n.
func (r *Rank) join(deadline time.Time) error {
	n := uint32(r.Size)
	hdr := r.core.hdr.seg.Mem
	w := futex.Word32(hdr, hdrAlloc)
	// The per-rank flag only feeds messages: which ranks never came.
	atomic.StoreUint32(futex.Word32(hdr, rankWord(r.Rank, rankAlloc)), 1)
	for {
		v := atomic.LoadUint32(w)
		if v&allocAbandoned != 0 {
			return r.abandonedError()
		}
		if atomic.CompareAndSwapUint32(w, v, v+1) {
			if v+1 == n {
				futex.Wake(w)
			}
			break
		}
	}
	var v uint32
	done := futex.SpinUntil(w, nil, deadline, spinFor, func() bool {
		v = atomic.LoadUint32(w)
		return v&allocAbandoned != 0 || v&allocCount >= n
	})
	if !done && r.abandon() {
		done, v = true, atomic.LoadUint32(w) // it completed just as we gave up
	}
	if done && v&allocAbandoned == 0 {
		r.joined = true
		if err := r.retireHeader(); err != nil {
			return r.core.errorf(kind.RuntimeError, "header: %v", err)
		}
		return nil
	}
	if done {
		return r.abandonedError()
	}
	arrived, miss := r.missing(rankAlloc, 1)
	return r.core.errorf(kind.TimeoutError, "waited %v at the subset barrier; %d of %d ranks arrived%s",
		r.req.Timeout, arrived, n, miss)
}

func (r *Rank) abandonedError() error {
	arrived, miss := r.missing(rankAlloc, 1)
	return r.core.errorf(kind.RuntimeError, "a peer gave up on the allocation; %d of %d ranks had arrived%s",
		arrived, r.Size, miss)
}

// abandon marks the allocation abandoned unless all ranks have arrived,
// and wakes the waiters so that they fail now. It reports whether the
// barrier had completed instead.
func (r *Rank) abandon() (completed bool) {
	w := futex.Word32(r.core.hdr.seg.Mem, hdrAlloc)
	for {
		v := atomic.LoadUint32(w)
		if v&allocCount >= uint32(r.Size) {
			return true
		}
		if v&allocAbandoned != 0 || atomic.CompareAndSwapUint32(w, v, v|allocAbandoned) {
			futex.Wake(w)
			return false
		}
	}
}

// retireHeader removes the header's name once nobody needs to find it:
// when all ranks have arrived (each has it mapped) or the allocation was
// abandoned (then the core's teardown does it). Only the creator does it,
// so the name is removed exactly once; the object itself lives on under a
// pool name until released.
func (r *Rank) retireHeader() error {
	if !r.core.hdrOwned {
		return nil
	}
	return r.core.hdr.retire()
}

// missing describes the ranks whose header word field is not want, for
// messages: "; missing ranks 2, 3".
func (r *Rank) missing(field int, want uint32) (arrived int, text string) {
	return missingRanks(r.core.hdr.seg.Mem, r.Size, field, want)
}

// missingRanks counts the ranks whose per-rank header word field holds
// want (they arrived, possibly flagged gaveUp since) and lists the
// others, then those that gave up.
func missingRanks(hdr []byte, n, field int, want uint32) (arrived int, text string) {
	var miss, quit []string
	list := func(l []string, j int) []string {
		if len(l) < 16 {
			return append(l, fmt.Sprint(j))
		} else if len(l) == 16 {
			return append(l, "...")
		}
		return l
	}
	for j := range n {
		switch atomic.LoadUint32(futex.Word32(hdr, rankWord(j, field))) {
		case want:
			arrived++
		case want | gaveUp:
			arrived++
			quit = list(quit, j)
		default:
			miss = list(miss, j)
		}
	}
	plural := func(l []string) string {
		if len(l) == 1 {
			return "rank " + l[0]
		}
		return "ranks " + strings.Join(l, ", ")
	}
	if len(miss) > 0 {
		text = "; missing " + plural(miss)
	}
	if len(quit) > 0 {
		text += "; " + plural(quit) + " gave up waiting"
	}
	return arrived, text
}
