package comm

// The rank core: what one rank of any domain holds, and its rules. A
// local domain's Rank (alloc.go) and a global domain's GlobalRank
// (global.go) each wrap one and add only their phases: how the rank's
// objects are named and found, and how the ranks agree on the table of
// windows (the allocation barrier, or a broker's import). See doc.go.

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"simpler/hal"
	"simpler/internal/futex"
	"simpler/kind"
)

// rankCore is one rank's part of a domain on its chip: its window, its
// peers' windows and the header, as shm objects and as mapped in the
// chip, and the CommContext. Its methods record every step as it
// completes, so that detach and teardown undo exactly what was done. It
// has no lock: its owner serialises the calls.
type rankCore struct {
	chip    hal.Chip
	prefix  string // the names' prefix; a pooled object's pool name starts with it
	name    string // the domain's label, for the CommContext and the chip's labels
	id      uint64 // the CommContext's allocation id: the allocation's, or the global domain's
	global  bool   // a global domain's rank: gen is its generation (for where)
	gen     uint64
	rank    int
	size    int // ranks
	winSize int // bytes per window

	own      *object   // this rank's window
	hdr      *object   // the domain's header
	hdrOwned bool      // this rank created the header: it removes the name
	peers    []*object // by rank, nil at this rank's index
	bases    []uint64  // every window as mapped in the chip, by rank; 0 if not mapped
	hdrBase  uint64    // the header as mapped in the chip
	wakeHdr  []byte    // the header as counted in this process's wake registry (wake.go)
	ctx      uint64    // the CommContext in device memory
	ctxLen   int       // its length
	released bool      // release ran: nothing is left, and nothing may be added
}

// testHookMapPeer, if set, runs before each peer window is mapped into
// the chip; an error fails the mapping there.
var testHookMapPeer func(rank, peer int) error

func newRankCore(chip hal.Chip, prefix, name string, id uint64, rank, size, winSize int) rankCore {
	return rankCore{chip: chip, prefix: prefix, name: name, id: id,
		rank: rank, size: size, winSize: winSize,
		peers: make([]*object, size), bases: make([]uint64, size)}
}

// where starts every error of the rank: `comm: allocating domain "d"
// (allocation 7) rank 1`, or `comm: global domain "g" (id 3, generation
// 1) rank 0`. It is made only when there is an error to word: every
// allocation makes a core, and a warm one costs a few microseconds.
func (c *rankCore) where() string {
	if c.global {
		return "comm: global domain " + globalDomainName(c.name, c.id, c.gen) + " rank " + strconv.Itoa(c.rank)
	}
	return "comm: allocating domain " + localDomainName(c.name, c.id) + " rank " + strconv.Itoa(c.rank)
}

func (c *rankCore) errorf(k kind.Kind, format string, args ...any) error {
	return kind.Errorf(k, "%s: %s", c.where(), fmt.Sprintf(format, args...))
}

// chipError puts a chip's error in the rank's context, keeping its kind.
func (c *rankCore) chipError(err error) error { return kind.Wrap(err, c.where()) }

func (c *rankCore) label(rank int) string {
	l := lastLabels.Load()
	if l == nil || l.name != c.name || len(l.labels) <= rank {
		l = &windowLabels{name: c.name, labels: make([]string, c.size)}
		for j := range l.labels {
			l.labels[j] = c.name + " rank " + strconv.Itoa(j)
		}
		lastLabels.Store(l)
	}
	return l.labels[rank]
}

// windowLabels are the chip labels of a domain's windows, by rank. Every
// rank of a domain labels every window the same, 1M strings at 1024
// ranks: the last domain's are kept (lastLabels), immutable once stored.
type windowLabels struct {
	name   string
	labels []string
}

var lastLabels atomic.Pointer[windowLabels]

// makeWindow creates this rank's window object under name. It is zero
// before the name reaches anyone: a fresh object is zero-filled by the
// kernel, a pooled one (pooled: a local domain's) is cleared and then
// renamed.
func (c *rankCore) makeWindow(name string, pooled bool) error {
	o, err := createObject(c.prefix, name, c.windowObject(), c.winSize, pooled)
	if err != nil {
		return err
	}
	c.own = o
	return nil
}

// windowObject is the size of a window's shm object: the window rounded
// up to pages and, for a global domain's, the page of its seal (seal.go),
// which no chip maps.
func (c *rankCore) windowObject() int {
	if c.global {
		return sealed(c.winSize)
	}
	return roundPage(c.winSize)
}

// mapWindow places window j, this rank's or a peer's (open by now), in
// the chip's address space.
func (c *rankCore) mapWindow(j int) error {
	o := c.own
	if j != c.rank {
		o = c.peers[j]
		if testHookMapPeer != nil {
			if err := testHookMapPeer(c.rank, j); err != nil {
				return c.errorf(kind.RuntimeError, "mapping the window of rank %d: %v", j, err)
			}
		}
	}
	// Capped, too: nothing past the window (a global window's seal) is
	// reachable from the slice the chip is given.
	base, err := c.chip.MapWindow(o.seg.Mem[:c.winSize:c.winSize], c.label(j))
	if err != nil {
		return c.chipError(err)
	}
	c.bases[j] = base
	return nil
}

// attach brings the rank into the domain once the table of windows is
// known: names, every rank's window name in rank order. It opens every
// peer's window, maps each window not mapped yet (in rank order, so a
// domain's addresses depend only on its ranks) and the header into the
// chip, and writes the CommContext, dead: setLive(1) makes it live. The
// header must be open. A peer's window already open (a global rank opens
// and checks them all first) is taken as it is. peerErr words the failure
// to open a peer's window (errNotReady: it does not exist, or not at that
// size).
func (c *rankCore) attach(names []string, peerErr func(j int, name string, err error) error) error {
	for j, name := range names {
		if j == c.rank || c.peers[j] != nil {
			continue
		}
		o, _, err := openObject(c.prefix, name, c.windowObject(), false)
		if err != nil {
			return peerErr(j, name, err)
		}
		c.peers[j] = o
	}
	for j, base := range c.bases {
		if base == 0 {
			if err := c.mapWindow(j); err != nil {
				return err
			}
		}
	}
	hdrSize := headerSize(c.size)
	base, err := c.chip.MapWindow(c.hdr.seg.Mem[:hdrSize:hdrSize], c.name+" header")
	if err != nil {
		return c.chipError(err)
	}
	c.hdrBase = base
	c.wakeHdr = c.hdr.seg.Mem[:hdrSize]
	wakeAttach(c.wakeHdr, c.size)
	b := encodeCtx(ctxFields{rank: c.rank, size: c.size, windowSize: c.winSize, allocID: c.id,
		headerBase: c.hdrBase, headerSize: hdrSize, name: c.name, bases: c.bases})
	// Not live until setLive: a kernel that opens it before is refused.
	clear(b[offLive : offLive+4])
	if c.ctx, err = c.chip.Malloc(len(b)); err != nil {
		return c.chipError(err)
	}
	c.ctxLen = len(b)
	if err := c.chip.CopyIn(c.ctx, b); err != nil {
		return c.chipError(err)
	}
	return nil
}

// setLive stores the CommContext's live word, if there is a context: 1
// lets a kernel Open it, 0 refuses it and fails every call of a View
// already open.
func (c *rankCore) setLive(v uint32) error {
	if c.ctx == 0 {
		return nil
	}
	b, err := c.chip.Bytes(c.ctx+offLive, 4)
	if err != nil {
		return err
	}
	atomic.StoreUint32(futex.Word32(b, 0), v)
	return nil
}

// detach takes back what attach did (the CommContext, the header's and
// the peers' mappings, the peers' objects), whether it completed or not.
// This rank's window and the header object stay as they were. An object
// is closed only once the chip no longer maps it, so what the chip
// refuses to unmap stays valid memory, and recorded for teardown.
func (c *rankCore) detach() error {
	var errs []error
	if c.ctx != 0 {
		if err := c.chip.Free(c.ctx); err != nil {
			errs = append(errs, err)
		} else {
			c.ctx = 0
		}
	}
	if c.hdrBase != 0 {
		if err := c.chip.UnmapWindow(c.hdrBase); err != nil {
			errs = append(errs, err)
		} else {
			c.hdrBase = 0
		}
		if c.wakeHdr != nil {
			wakeDetach(c.wakeHdr)
			c.wakeHdr = nil
		}
	}
	// Last mapped first: a chip keeps its regions sorted, so unmapping
	// from the top end moves nothing (a 1024-rank domain maps 1024).
	for j := len(c.peers) - 1; j >= 0; j-- {
		o := c.peers[j]
		if o == nil {
			continue
		}
		if c.bases[j] != 0 {
			if err := c.chip.UnmapWindow(c.bases[j]); err != nil {
				errs = append(errs, err)
				continue
			}
			c.bases[j] = 0
		}
		if err := o.release(); err != nil { // only failures: a 1024-rank detach appended 1024 nils
			errs = append(errs, err)
		}
		c.peers[j] = nil
	}
	return errors.Join(errs...)
}

// teardown undoes everything, at any phase: detach, then this rank's
// window and the header, whose names go first if this rank made them.
// Unlike detach it drops every object even where the chip refused to let
// go of it: whatever the chip says, the shm objects must go. Errors are
// collected, never stop the cleanup.
func (c *rankCore) teardown() error {
	errs := []error{c.detach()}
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	c.ctx, c.hdrBase = 0, 0 // detach tried; what the chip refused is beyond help
	for j, base := range c.bases {
		if j == c.rank && base != 0 {
			add(c.chip.UnmapWindow(base))
		}
		c.bases[j] = 0
	}
	for j, o := range c.peers {
		if o != nil {
			add(o.release())
			c.peers[j] = nil
		}
	}
	if c.own != nil {
		add(c.own.retire())
		add(c.own.release())
		c.own = nil
	}
	if c.hdr != nil {
		if c.hdrOwned {
			add(c.hdr.retire())
		}
		add(c.hdr.release())
		c.hdr = nil
	}
	return errors.Join(errs...)
}

// release tears the rank down once, with teardown (the core's, after the
// wrapper's own steps); a second call does nothing and returns nil. what()
// names the domain in the error ("domain ...", "global domain ..."); it
// is called only for one.
func (c *rankCore) release(what func() string, teardown func() error) error {
	if c.released {
		return nil
	}
	c.released = true
	if err := teardown(); err != nil {
		return fmt.Errorf("comm: releasing %s rank %d: %w", what(), c.rank, err)
	}
	return nil
}

// checkRequest checks what a local and a global request share; what()
// starts every message ("comm: allocating domain ..."), made only for one.
func checkRequest(what func() string, chip hal.Chip, prefix string, ranks, rank int, timeout time.Duration) error {
	bad := func(format string, args ...any) error {
		return kind.Errorf(kind.ValueError, "%s: "+format, append([]any{what()}, args...)...)
	}
	switch {
	case chip == nil:
		return bad("no chip")
	case prefix != "" && !goodPrefix(prefix):
		return bad(`name prefix %q must start with "simpler-" and contain no "/"`, prefix)
	case ranks < 1 || ranks > maxRanks:
		return bad("%d ranks; want 1..%d", ranks, maxRanks)
	case rank < 0 || rank >= ranks:
		return kind.Errorf(kind.IndexError, "%s: rank %d out of range for %d ranks", what(), rank, ranks)
	case timeout <= 0:
		return bad("timeout must be > 0, got %v", timeout)
	}
	return nil
}
