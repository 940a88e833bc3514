package comm

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"simpler/hal"
	"simpler/hal/shm"
	"simpler/kind"
)

// Request describes one allocation of a domain. Every rank passes the same
// Request.
type Request struct {
	// Namespace is unique per Worker, e.g. "w3", and part of every shm
	// name; "w3~2.5" puts the allocation in warm slot 2 of w3, generation
	// 5, and "w3~2.5+" takes back the ranks that slot's last domain
	// parked (warm.go).
	Namespace    string
	AllocationID uint64        // fresh per allocation; scopes names and the barrier
	Name         string        // the domain's label (for messages)
	Ranks        int           // n >= 1
	WindowSize   int           // bytes per rank, > 0
	Timeout      time.Duration // bound on the subset barrier, > 0
	// Prefix starts every shm name; "" means shm.Prefix() of this
	// process. Ranks in child processes pass their parent's prefix so
	// that all ranks agree on the names and the parent can find leftovers.
	Prefix string
	// Key is 128 random bits (NewKey) drawn by whoever makes the request,
	// part of every name, so that nobody can tell an allocation's names
	// from the names listed so far and take one first: the prefix is
	// visible once a process has made any object, and the namespace and
	// allocation id are a counter.
	Key string
	// Placed, if set, is called once the rank's header and window are
	// mapped into its chip, before it waits for its peers: a caller that
	// starts the ranks one after another (a deterministic schedule, which
	// wants every window at the same address in every replay) starts the
	// next one then. Allocate calls it on failure too, at the latest.
	Placed func() `json:"-"`
}

// keyLen is the length of a Request's key: 128 bits in hex.
const keyLen = 32

// NewKey draws a Request's key.
func NewKey() string {
	var b [keyLen / 2]byte
	rand.Read(b[:]) // crypto/rand does not fail on Linux
	return hex.EncodeToString(b[:])
}

func (q *Request) prefix() string {
	if q.Prefix != "" {
		return q.Prefix
	}
	return shm.Prefix()
}

// objectName is <prefix>dom-<namespace>-<allocation id>-<key>-<suffix>.
// (Plain concatenation: names are made on every allocation, fmt is
// slower.)
func (q *Request) objectName(suffix string) string {
	return q.prefix() + "dom-" + q.Namespace + "-" + strconv.FormatUint(q.AllocationID, 10) + "-" + q.Key + "-" + suffix
}

func (q *Request) windowName(rank int) string { return q.objectName("r" + strconv.Itoa(rank)) }
func (q *Request) headerName() string         { return q.objectName("hdr") }

// domain names the domain in messages: "name" (allocation N), as %q
// prints the name. (Plain concatenation: every rank's allocation makes
// it, a warm one in about a microsecond in all, and fmt is slower.)
func (q *Request) domain() string { return localDomainName(q.Name, q.AllocationID) }

func localDomainName(name string, id uint64) string {
	return strconv.Quote(name) + " (allocation " + strconv.FormatUint(id, 10) + ")"
}

// what starts the request's errors before it has a rank core.
func (q *Request) what() string { return "comm: allocating domain " + q.domain() }

// check refuses a bad request.
func (q *Request) check(rank int, chip hal.Chip) error {
	if err := checkRequest(q.what, chip, q.Prefix, q.Ranks, rank, q.Timeout); err != nil {
		return err
	}
	switch {
	case q.Namespace == "" || strings.ContainsRune(q.Namespace, '/'):
		return kind.Errorf(kind.ValueError, "%s: bad namespace %q", q.what(), q.Namespace)
	case q.WindowSize <= 0:
		return kind.Errorf(kind.ValueError, "%s: window size must be > 0, got %d", q.what(), q.WindowSize)
	case len(q.Key) != keyLen || !lowerHex(q.Key):
		return kind.Errorf(kind.ValueError, "%s: the key must be %d lowercase hex digits (NewKey), got %q", q.what(), keyLen, q.Key)
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
	core rankCore

	mu     sync.Mutex // serialises Release
	joined bool       // the allocation barrier completed
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
//  3. join the allocation barrier in the header and wait for all ranks:
//     past it, every window exists under the name the request gives it,
//     which is the table a global domain's import is handed;
//  4. attach: map every window and the header into the chip, write the
//     CommContext, and make it live at once.
//
// On failure everything done so far is undone and the allocation is
// marked abandoned in the header, so that peers still waiting fail at once
// instead of at their timeout.
func Allocate(req Request, rank int, chip hal.Chip) (*Rank, error) {
	if err := req.check(rank, chip); err != nil {
		return nil, err
	}
	if _, _, _, ok := slotOf(req.Namespace); ok {
		if r, done, err := allocateWarm(req, rank, chip); done {
			return r, err
		}
	}
	if req.Placed != nil {
		var once sync.Once
		placed := req.Placed
		req.Placed = func() { once.Do(placed) }
		defer req.Placed()
	}
	r := &Rank{Rank: rank, Size: req.Ranks, WindowSize: req.WindowSize, req: req,
		core: newRankCore(chip, req.prefix(), req.Name, req.AllocationID, rank, req.Ranks, req.WindowSize)}
	if err := r.setup(time.Now().Add(req.Timeout)); err != nil {
		if terr := r.teardown(); terr != nil {
			err = fmt.Errorf("%w (undoing it: %v)", err, terr)
		}
		return nil, err
	}
	r.DeviceCtx, r.WindowBase = r.core.ctx, r.core.bases[rank]
	r.Bases = slices.Clone(r.core.bases) // the core's are zeroed on release
	return r, nil
}

func (r *Rank) setup(deadline time.Time) error {
	c := &r.core
	if err := r.openHeader(deadline); err != nil {
		return err
	}
	names := make([]string, r.Size)
	for j := range names {
		names[j] = r.req.windowName(j)
	}
	if err := c.makeWindow(names[r.Rank], true); err != nil {
		return c.errorf(kind.RuntimeError, "window: %v", err)
	}
	if r.req.Placed != nil {
		r.req.Placed()
	}
	// The window is zero now; only from here on may peers store into it.
	if err := r.join(deadline); err != nil {
		return err
	}
	if testHookJoined != nil {
		testHookJoined(r.req, r.Rank)
	}
	if err := c.attach(names, r.peerError); err != nil {
		return err
	}
	if err := c.setLive(1); err != nil {
		return c.chipError(err)
	}
	return nil
}

// peerError words a peer's window that could not be opened after the
// barrier: every rank made its window before joining, so it existed.
func (r *Rank) peerError(j int, _ string, err error) error {
	if errors.Is(err, errNotReady) {
		return r.core.errorf(kind.RuntimeError, "the window of rank %d is gone (did rank %d fail?)", j, j)
	}
	return r.core.errorf(kind.RuntimeError, "window of rank %d: %v", j, err)
}

// Release undoes Allocate for this rank: it marks the CommContext dead (a
// later Open of it fails), removes the windows and the header from the
// chip, frees the CommContext, removes the name of this rank's window and
// drops this rank's hold on the shm objects (the last holder in this
// process unmaps them; its own window goes to the pool). A rank of a warm
// slot parks instead, all of it kept for the slot's next allocation, with
// the CommContext dead and no name left (warm.go). A second call does
// nothing and returns nil.
//
// The caller must ensure no kernel of this rank still uses the domain: the
// memory behind its windows may be unmapped.
func (r *Rank) Release() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.core.released && r.park() {
		return nil
	}
	return r.core.release(func() string { return "domain " + r.req.domain() }, r.teardown)
}

// teardown undoes whatever setup completed; it also serves a failed
// Allocate.
func (r *Rank) teardown() error {
	// Dead first: a kernel that looks at the context from now on is
	// refused even before the memory is freed.
	err := r.core.setLive(0)
	if r.core.hdr != nil && !r.joined {
		r.abandon()
	}
	return errors.Join(err, r.core.teardown())
}
