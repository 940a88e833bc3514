package comm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"simpler/hal"
	"simpler/hal/shm"
	"simpler/internal/futex"
	"simpler/kind"
)

// Request describes one allocation of a domain. Every rank passes the same
// Request.
type Request struct {
	Namespace    string        // unique per Worker, e.g. "w3"; part of every shm name
	AllocationID uint64        // fresh per allocation; scopes names and the barrier
	Name         string        // the domain's label (for messages)
	Ranks        int           // n >= 1
	WindowSize   int           // bytes per rank, > 0
	Timeout      time.Duration // bound on the subset barrier, > 0
	// Prefix starts every shm name; "" means shm.Prefix() of this
	// process. Ranks in child processes pass their parent's prefix so
	// that all ranks agree on the names and the parent can find leftovers.
	Prefix string
}

func (q *Request) prefix() string {
	if q.Prefix != "" {
		return q.Prefix
	}
	return shm.Prefix()
}

// objectName is <prefix>dom-<namespace>-<allocation id>-<suffix>. (Plain
// concatenation: names are made on every allocation, fmt is slower.)
func (q *Request) objectName(suffix string) string {
	return q.prefix() + "dom-" + q.Namespace + "-" + strconv.FormatUint(q.AllocationID, 10) + "-" + suffix
}

func (q *Request) windowName(rank int) string { return q.objectName("r" + strconv.Itoa(rank)) }
func (q *Request) headerName() string         { return q.objectName("hdr") }

// domain names the domain in messages.
func (q *Request) domain() string {
	return fmt.Sprintf("%q (allocation %d)", q.Name, q.AllocationID)
}

func (q *Request) check(rank int, chip hal.Chip) error {
	bad := func(format string, args ...any) error {
		return kind.Errorf(kind.ValueError, "comm: allocating domain %s: "+format, append([]any{q.domain()}, args...)...)
	}
	switch {
	case chip == nil:
		return bad("no chip")
	case q.Namespace == "" || strings.ContainsRune(q.Namespace, '/'):
		return bad("bad namespace %q", q.Namespace)
	case strings.ContainsRune(q.Prefix, '/') || (q.Prefix != "" && !strings.HasPrefix(q.Prefix, "simpler-")):
		return bad(`name prefix %q must start with "simpler-" and contain no "/"`, q.Prefix)
	case q.Ranks < 1 || q.Ranks > maxRanks:
		return bad("%d ranks; want 1..%d", q.Ranks, maxRanks)
	case rank < 0 || rank >= q.Ranks:
		return kind.Errorf(kind.IndexError, "comm: allocating domain %s: rank %d out of range for %d ranks", q.domain(), rank, q.Ranks)
	case q.WindowSize <= 0:
		return bad("window size must be > 0, got %d", q.WindowSize)
	case q.Timeout <= 0:
		return bad("timeout must be > 0, got %v", q.Timeout)
	}
	return nil
}

// Rank is one rank's part of an allocated domain. The exported fields are
// read-only.
type Rank struct {
	Rank, Size int
	DeviceCtx  uint64   // device address of the CommContext in the chip's space
	WindowBase uint64   // this rank's window in the chip's space
	WindowSize int      // bytes per window
	Bases      []uint64 // every rank's window as mapped in this chip; Bases[Rank] == WindowBase

	req  Request
	chip hal.Chip

	mu       sync.Mutex
	released bool

	windows    []*object // by rank; windows[Rank] is this rank's own
	hdr        *object
	hdrCreated bool   // this rank created the header: it unlinks the name
	hdrBase    uint64 // the header as mapped in the chip
	joined     bool   // the allocation barrier completed
}

// testHookJoined, if set, runs in Allocate right after the allocation
// barrier completed (tests use it to hold one rank there).
var testHookJoined func(req Request, rank int)

// Allocate sets up rank's part of the domain on chip. See the package
// comment for the contract; the steps, in order:
//
//  1. open the allocation's header object, creating it if this rank is the
//     first to arrive (creation is exclusive; the others retry opening
//     until it exists, within req.Timeout);
//  2. make this rank's window object (from the pool or fresh), zeroed;
//  3. join the allocation barrier in the header and wait for all ranks;
//  4. map every peer's window and the header, and place them all in the
//     chip's address space;
//  5. write the CommContext into device memory.
//
// On failure everything done so far is undone and the allocation is
// marked abandoned in the header, so that peers still waiting fail at once
// instead of at their timeout.
func Allocate(req Request, rank int, chip hal.Chip) (*Rank, error) {
	if err := req.check(rank, chip); err != nil {
		return nil, err
	}
	r := &Rank{
		Rank: rank, Size: req.Ranks, WindowSize: req.WindowSize,
		req: req, chip: chip,
		windows: make([]*object, req.Ranks),
		Bases:   make([]uint64, req.Ranks),
	}
	if err := r.setup(time.Now().Add(req.Timeout)); err != nil {
		if terr := r.teardown(); terr != nil {
			err = fmt.Errorf("%w (undoing it: %v)", err, terr)
		}
		return nil, err
	}
	return r, nil
}

func (r *Rank) errorf(k kind.Kind, format string, args ...any) error {
	return kind.Errorf(k, "comm: allocating domain %s rank %d: %s", r.req.domain(), r.Rank, fmt.Sprintf(format, args...))
}

// chipError puts a chip's error in the allocation's context, keeping its
// kind.
func (r *Rank) chipError(err error) error {
	return kind.Wrap(err, fmt.Sprintf("comm: allocating domain %s rank %d", r.req.domain(), r.Rank))
}

func (r *Rank) setup(deadline time.Time) error {
	q := &r.req
	n := q.Ranks
	hdrSize := headerSize(n)
	if err := r.openHeader(hdrSize, deadline); err != nil {
		return err
	}
	winSize := roundPage(q.WindowSize)
	own, err := createWindow(q.prefix(), q.windowName(r.Rank), winSize, q.WindowSize)
	if err != nil {
		return r.errorf(kind.RuntimeError, "window: %v", err)
	}
	r.windows[r.Rank] = own
	// The window is zero now; only from here on may peers store into it.
	if err := r.join(deadline); err != nil {
		return err
	}
	if testHookJoined != nil {
		testHookJoined(r.req, r.Rank)
	}
	for j := range n {
		if j == r.Rank {
			continue
		}
		// Every rank made its window before joining, so it exists now.
		o, _, err := openObject(q.prefix(), q.windowName(j), winSize, false)
		if errors.Is(err, errNotReady) {
			return r.errorf(kind.RuntimeError, "the window of rank %d is gone (did rank %d fail?)", j, j)
		} else if err != nil {
			return r.errorf(kind.RuntimeError, "window of rank %d: %v", j, err)
		}
		r.windows[j] = o
	}
	for j, o := range r.windows {
		base, err := r.chip.MapWindow(o.seg.Mem[:q.WindowSize], fmt.Sprintf("%s rank %d", q.Name, j))
		if err != nil {
			return r.chipError(err)
		}
		r.Bases[j] = base
	}
	r.WindowBase = r.Bases[r.Rank]
	if r.hdrBase, err = r.chip.MapWindow(r.hdr.seg.Mem[:hdrSize], q.Name+" header"); err != nil {
		return r.chipError(err)
	}
	f := ctxFields{rank: r.Rank, size: n, windowSize: q.WindowSize, allocID: q.AllocationID,
		headerBase: r.hdrBase, headerSize: hdrSize, name: q.Name, bases: r.Bases}
	b := encodeCtx(f)
	ctx, err := r.chip.Malloc(len(b))
	if err != nil {
		return r.chipError(err)
	}
	r.DeviceCtx = ctx
	if err := r.chip.CopyIn(ctx, b); err != nil {
		return r.chipError(err)
	}
	return nil
}

// Release undoes Allocate for this rank: it marks the CommContext dead (a
// later Open of it fails), removes the windows and the header from the
// chip, frees the CommContext, and drops this rank's hold on the shm
// objects (the last holder in this process unmaps them; its own window goes
// to the pool). A second call does nothing and returns nil.
//
// The caller must ensure no kernel of this rank still uses the domain: the
// memory behind its windows may be unmapped.
func (r *Rank) Release() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return nil
	}
	r.released = true
	if err := r.teardown(); err != nil {
		return fmt.Errorf("comm: releasing domain %s rank %d: %w", r.req.domain(), r.Rank, err)
	}
	return nil
}

// teardown undoes whatever setup completed; it also serves a failed
// Allocate. Errors are collected, never stop the cleanup: whatever the
// chip says, the shm objects must go.
func (r *Rank) teardown() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if r.DeviceCtx != 0 {
		// Dead first: a kernel that looks at the context from now on is
		// refused even before the memory is freed.
		if b, err := r.chip.Bytes(r.DeviceCtx+offLive, 4); err == nil {
			atomic.StoreUint32(futex.Word32(b, 0), 0)
		} else {
			add(err)
		}
		add(r.chip.Free(r.DeviceCtx))
	}
	// The chip must stop referring to the memory before it is unmapped.
	for _, base := range r.Bases {
		if base != 0 {
			add(r.chip.UnmapWindow(base))
		}
	}
	if r.hdrBase != 0 {
		add(r.chip.UnmapWindow(r.hdrBase))
	}
	for _, o := range r.windows {
		if o != nil {
			add(o.release())
		}
	}
	if r.hdr != nil {
		if !r.joined {
			r.abandon()
		}
		add(r.unlinkHeader())
		add(r.hdr.release())
	}
	return errors.Join(errs...)
}
