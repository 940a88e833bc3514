package comm

// Global domains: the per-node primitives of a domain whose ranks are
// hosted by several nodes (separate processes, possibly separate daemons),
// brought up by a broker that runs a transaction node by node. This file
// knows nothing of the broker. For each of its local ranks a node calls
//
//	PrepareGlobal  make the rank's window (zeroed) and map it into the
//	               chip; export its Descriptor
//	Import         given the complete rank-ordered table of descriptors,
//	               map every peer's window and the domain's header into the
//	               chip and write the CommContext (not yet live)
//	Commit         make the CommContext live: kernels may Open it
//	Invalidate     make it dead again, before releasing
//	Release/Abort  undo everything, at any phase
//
// The sim profile: every window is a POSIX shm object named
//
//	<prefix>gdom-<domain id, hex>-<generation, hex>-<key>-r<rank, decimal>
//
// where <prefix> is the preparing node's (GlobalRequest.Prefix, by default
// shm.Prefix() of its process: "simpler-<pid>-") and <key> is 128 random
// bits (32 hex digits) the rank draws at Prepare. The name is the
// descriptor's handle, so nodes need not share a prefix; and since another
// node opens the window by that name, which a broker relays, the key makes
// the name a capability: a client that was not given it cannot guess a
// window of someone else's domain into its table. The header (the barrier
// and wait-sequence words that View uses, same layout as a local domain's)
// is created zeroed by rank 0's Prepare under
//
//	<rank 0's window name without "-r0">-hdr
//
// and every other rank derives that name from the table's descriptor of
// rank 0 at Import, retrying until it exists, within GlobalRequest.Timeout.
// Rank 0's Release unlinks it; ranks that have it mapped keep using it
// until they release. Each rank's Release unlinks its own window's name.
// Global objects are never pooled: once every rank has released, nothing
// of the domain remains in /dev/shm.
//
// Names are scoped by domain id and generation, so concurrent domains and
// the generations of one domain never collide. A (domain id, generation)
// pair is prepared once: a retry after an abort takes a new generation
// (re-preparing the same one is refused while its names exist, and a
// process that still maps a peer window of the old one could be handed that
// stale mapping).

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
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

// GlobalRequest describes one rank's part of one generation of a global
// domain. DomainID, Generation, Name, Ranks and WindowSize must be the
// same on every node; Prefix and Timeout are the node's own.
type GlobalRequest struct {
	// Prefix starts the names of the objects this node creates; "" means
	// shm.Prefix() of this process. It must start with "simpler-" and
	// contain no "/".
	Prefix     string
	DomainID   uint64
	Generation uint64
	Name       string        // the domain's label, for messages and the CommContext
	Ranks      int           // 1..1024
	WindowSize int           // bytes per rank, > 0
	Timeout    time.Duration // bound on Import waiting for rank 0's header, > 0
}

func (q *GlobalRequest) prefix() string {
	if q.Prefix != "" {
		return q.Prefix
	}
	return shm.Prefix()
}

// globalStem is the part of every name of one generation of a domain that
// follows the prefix: "gdom-<id>-<generation>-".
func globalStem(domainID, generation uint64) string {
	return "gdom-" + strconv.FormatUint(domainID, 16) + "-" + strconv.FormatUint(generation, 16) + "-"
}

// globalKeyLen is the length of a window name's key: 128 bits in hex.
const globalKeyLen = 32

// newGlobalKey draws a window name's key.
func newGlobalKey() string {
	var b [globalKeyLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}

func globalWindowSuffix(domainID, generation uint64, key string, rank int) string {
	return globalStem(domainID, generation) + key + "-r" + strconv.Itoa(rank)
}

// globalHeaderOf is the header's name, made from rank 0's window name.
func globalHeaderOf(window0 string) string {
	return strings.TrimSuffix(window0, "-r0") + "-hdr"
}

func (q *GlobalRequest) windowName(key string, rank int) string {
	return q.prefix() + globalWindowSuffix(q.DomainID, q.Generation, key, rank)
}

// windowKey returns the key of a window name of this domain's rank, if
// handle is one: a good prefix, this domain's stem, a key of lowercase
// hex, this rank.
func (q *GlobalRequest) windowKey(handle string, rank int) (string, bool) {
	stem := globalStem(q.DomainID, q.Generation)
	i := strings.Index(handle, stem)
	if i < 0 || !goodPrefix(handle[:i]) || len(handle) > DescriptorHandleMax {
		return "", false
	}
	rest := handle[i+len(stem):]
	key, r, ok := strings.Cut(rest, "-r")
	if !ok || len(key) != globalKeyLen || strings.Trim(key, "0123456789abcdef") != "" || r != strconv.Itoa(rank) {
		return "", false
	}
	return key, true
}

// goodPrefix reports whether p may start an shm name of a domain.
func goodPrefix(p string) bool {
	return strings.HasPrefix(p, "simpler-") && !strings.ContainsAny(p, "/\x00")
}

// domain names the domain in messages.
func (q *GlobalRequest) domain() string {
	return fmt.Sprintf("%q (id %d, generation %d)", q.Name, q.DomainID, q.Generation)
}

// maxWindow is the largest window View accepts.
const maxWindow = 1 << 40

func (q *GlobalRequest) check(rank int, chip hal.Chip) error {
	bad := func(format string, args ...any) error {
		return kind.Errorf(kind.ValueError, "comm: preparing global domain %s: "+format, append([]any{q.domain()}, args...)...)
	}
	switch {
	case chip == nil:
		return bad("no chip")
	case q.Prefix != "" && !goodPrefix(q.Prefix):
		return bad(`name prefix %q must start with "simpler-" and contain no "/"`, q.Prefix)
	case q.Ranks < 1 || q.Ranks > maxRanks:
		return bad("%d ranks; want 1..%d", q.Ranks, maxRanks)
	case rank < 0 || rank >= q.Ranks:
		return kind.Errorf(kind.IndexError, "comm: preparing global domain %s: rank %d out of range for %d ranks", q.domain(), rank, q.Ranks)
	case q.WindowSize <= 0 || q.WindowSize > maxWindow:
		return bad("window size must be in 1..%d, got %d", maxWindow, q.WindowSize)
	case q.Timeout <= 0:
		return bad("timeout must be > 0, got %v", q.Timeout)
	case !slices.Contains(chip.Platform().CommProfiles(), ProfileSim.String()):
		return bad("device %d is on platform %s, which has no %q comm profile", chip.DeviceID(), chip.Platform().Name(), ProfileSim.String())
	}
	if name := q.windowName(strings.Repeat("0", globalKeyLen), rank); len(name) > DescriptorHandleMax {
		return bad("the window name %q is longer than %d bytes (shorten the prefix)", name, DescriptorHandleMax)
	}
	return nil
}

// GlobalRank is one rank's part of a global domain on one chip, from
// PrepareGlobal to Release. Its methods are safe for concurrent use; they
// serialise, so an Import waiting for the header holds up the others.
type GlobalRank struct {
	req  GlobalRequest
	rank int
	chip hal.Chip
	desc Descriptor
	key  preparedKey

	mu          sync.Mutex
	imported    bool
	committed   bool
	invalidated bool
	released    bool
	broken      error // an Import's rollback failed: only Release is left

	own        *object   // this rank's window (Prepare)
	hdr        *object   // the header: rank 0's from Prepare, the others' from Import
	hdrCreated bool      // rank 0: this rank created the header and unlinks it
	peers      []*object // by rank, nil at this rank's index (Import)
	bases      []uint64  // every window in the chip, by rank; own from Prepare, peers from Import
	hdrBase    uint64    // the header in the chip (Import)
	ctx        uint64    // the CommContext (Import)
	table      []Descriptor
}

// testHookGlobalMapPeer, if set, runs in Import before each peer window is
// mapped into the chip; an error fails the Import there.
var testHookGlobalMapPeer func(rank, peer int) error

// PrepareGlobal sets up rank's window of a global domain on chip: it
// creates the window's shm object (fresh, so zeroed; exclusively, so a
// reused name fails), maps it into chip, and for rank 0 also creates the
// domain's header. It returns the rank and the descriptor to export. There
// is no barrier: it waits for nobody. On failure nothing is left behind.
func PrepareGlobal(req GlobalRequest, rank int, chip hal.Chip) (*GlobalRank, Descriptor, error) {
	if err := req.check(rank, chip); err != nil {
		return nil, Descriptor{}, err
	}
	key := preparedKey{req.prefix(), req.DomainID, req.Generation, rank}
	if !claimPrepared(key) {
		return nil, Descriptor{}, kind.Errorf(kind.RuntimeError, "comm: global domain %s rank %d is already prepared in this process (file exists): a retry takes a new generation", req.domain(), rank)
	}
	g := &GlobalRank{
		req: req, rank: rank, chip: chip, key: key,
		peers: make([]*object, req.Ranks),
		bases: make([]uint64, req.Ranks),
	}
	if err := g.prepare(); err != nil {
		if terr := g.teardown(); terr != nil {
			err = fmt.Errorf("%w (undoing it: %v)", err, terr)
		}
		return nil, Descriptor{}, err
	}
	return g, g.desc, nil
}

func (g *GlobalRank) prepare() error {
	q := &g.req
	window := q.windowName(newGlobalKey(), g.rank)
	if g.rank == 0 {
		o, err := createOwned(globalHeaderOf(window), headerSize(q.Ranks))
		if err != nil {
			return g.errorf(kind.RuntimeError, "creating the header: %v", err)
		}
		g.hdr, g.hdrCreated = o, true
	}
	o, err := createOwned(window, roundPage(q.WindowSize))
	if err != nil {
		return g.errorf(kind.RuntimeError, "creating the window: %v", err)
	}
	g.own = o
	base, err := g.chip.MapWindow(o.seg.Mem[:q.WindowSize], g.label(g.rank))
	if err != nil {
		return g.chipError(err)
	}
	g.bases[g.rank] = base
	g.desc = Descriptor{
		Profile: ProfileSim, DomainID: q.DomainID, Generation: q.Generation,
		Rank: uint32(g.rank), Ranks: uint32(q.Ranks), MappingSize: uint64(q.WindowSize),
		Handle: o.seg.Name,
	}
	return nil
}

// createOwned creates the object name of size bytes, zeroed, failing if
// the name exists, and enters it in the process's cache so that ranks of
// this process that import it share the mapping. It is never pooled.
func createOwned(name string, size int) (*object, error) {
	seg, err := shm.CreateNamed(name, size)
	if err != nil {
		return nil, err
	}
	return cacheNew(&object{seg: seg, key: name, refs: 1})
}

// unlinkOwned removes the name of an object this process created: a new
// open of the name fails from now on, while existing mappings stay valid.
func unlinkOwned(o *object) error {
	cacheMu.Lock()
	if cache[o.key] == o {
		delete(cache, o.key)
	}
	cacheMu.Unlock()
	return o.seg.Unlink()
}

func (g *GlobalRank) label(rank int) string {
	return g.req.Name + " rank " + strconv.Itoa(rank)
}

func (g *GlobalRank) errorf(k kind.Kind, format string, args ...any) error {
	return kind.Errorf(k, "comm: global domain %s rank %d: %s", g.req.domain(), g.rank, fmt.Sprintf(format, args...))
}

// chipError puts a chip's error in the domain's context, keeping its kind.
func (g *GlobalRank) chipError(err error) error {
	return kind.Wrap(err, fmt.Sprintf("comm: global domain %s rank %d", g.req.domain(), g.rank))
}

// Import brings the rank into the domain described by table, the
// descriptors of all ranks in rank order, as exported by every node's
// PrepareGlobal. It checks the table (one descriptor per rank at its index,
// all of this domain, generation, profile and window size, with window
// names of the domain, and this rank's own entry exactly as Prepare
// returned it), opens every peer's window by name (they must exist: every
// Prepare precedes every Import), opens the header (rank 0's, waiting up to
// Timeout for it to exist), maps all of them into the chip and writes the
// CommContext, not yet live: Commit makes it so.
//
// Import is atomic: on failure everything it mapped is unmapped and
// everything it opened is closed, and the rank is as Prepare left it, ready
// for another Import. After a successful Import, another with an equal
// table does nothing and returns nil; one with a different table is
// refused and changes nothing. Import after Invalidate or Release fails.
func (g *GlobalRank) Import(table []Descriptor) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.released:
		return g.errorf(kind.RuntimeError, "import after release")
	case g.broken != nil:
		return g.errorf(kind.RuntimeError, "an earlier import could not be undone (%v); release the rank", g.broken)
	case g.invalidated:
		return g.errorf(kind.RuntimeError, "import after invalidate")
	case g.imported:
		if slices.Equal(table, g.table) {
			return nil
		}
		return g.errorf(kind.RuntimeError, "already imported with a different table (%s); refusing the new one", tableDiff(g.table, table))
	}
	if err := g.checkTable(table); err != nil {
		return err
	}
	if err := g.importTable(table); err != nil {
		if uerr := g.undoImport(); uerr != nil {
			g.broken = uerr
			return fmt.Errorf("%w (undoing the import failed: %v; the rank can only be released now)", err, uerr)
		}
		return err
	}
	g.table = slices.Clone(table)
	g.imported = true
	return nil
}

// tableDiff describes the first difference between two tables.
func tableDiff(had, got []Descriptor) string {
	if len(had) != len(got) {
		return fmt.Sprintf("%d descriptors, had %d", len(got), len(had))
	}
	for j := range had {
		if had[j] != got[j] {
			return fmt.Sprintf("descriptor %d is %v, had %v", j, got[j], had[j])
		}
	}
	return "equal"
}

func (g *GlobalRank) checkTable(table []Descriptor) error {
	q := &g.req
	if len(table) != q.Ranks {
		return g.errorf(kind.ValueError, "the table has %d descriptors for %d ranks", len(table), q.Ranks)
	}
	for j, d := range table {
		bad := func(format string, args ...any) error {
			return g.errorf(kind.ValueError, "descriptor %d of the table: "+format, append([]any{j}, args...)...)
		}
		switch {
		case d.Profile != ProfileSim:
			return bad("profile %v, want %v", d.Profile, ProfileSim)
		case d.DomainID != q.DomainID || d.Generation != q.Generation:
			return bad("domain %d generation %d, want domain %d generation %d", d.DomainID, d.Generation, q.DomainID, q.Generation)
		case int(d.Rank) != j:
			return bad("it is rank %d's; the table must be in rank order", d.Rank)
		case int(d.Ranks) != q.Ranks:
			return bad("%d ranks, want %d", d.Ranks, q.Ranks)
		case d.MappingSize != uint64(q.WindowSize):
			return bad("mapping size %d, want %d", d.MappingSize, q.WindowSize)
		}
		if _, ok := q.windowKey(d.Handle, j); !ok {
			return bad("handle %q is not the name of rank %d's window of this domain", d.Handle, j)
		}
	}
	if table[g.rank] != g.desc {
		return g.errorf(kind.ValueError, "descriptor %d of the table is %v, but this rank prepared %v", g.rank, table[g.rank], g.desc)
	}
	return nil
}

// importTable does Import's work on a checked table, recording each step
// in g as it completes, for undoImport.
func (g *GlobalRank) importTable(table []Descriptor) error {
	q := &g.req
	n := q.Ranks
	if !g.hdrCreated {
		if err := g.openHeader(globalHeaderOf(table[0].Handle), time.Now().Add(q.Timeout)); err != nil {
			return err
		}
	}
	winSize := roundPage(q.WindowSize)
	for j := range n {
		if j == g.rank {
			continue
		}
		o, _, err := openObject(q.prefix(), table[j].Handle, winSize, false)
		if errors.Is(err, errNotReady) {
			return g.errorf(kind.RuntimeError, "the window of rank %d (%s) does not exist or is smaller than %d bytes (was rank %d released?)",
				j, table[j].Handle, winSize, j)
		} else if err != nil {
			return g.errorf(kind.RuntimeError, "the window of rank %d: %v", j, err)
		}
		g.peers[j] = o
	}
	for j, o := range g.peers {
		if o == nil {
			continue
		}
		if testHookGlobalMapPeer != nil {
			if err := testHookGlobalMapPeer(g.rank, j); err != nil {
				return g.errorf(kind.RuntimeError, "mapping the window of rank %d: %v", j, err)
			}
		}
		base, err := g.chip.MapWindow(o.seg.Mem[:q.WindowSize], g.label(j))
		if err != nil {
			return g.chipError(err)
		}
		g.bases[j] = base
	}
	hdrSize := headerSize(n)
	base, err := g.chip.MapWindow(g.hdr.seg.Mem[:hdrSize], q.Name+" header")
	if err != nil {
		return g.chipError(err)
	}
	g.hdrBase = base
	b := encodeCtx(ctxFields{rank: g.rank, size: n, windowSize: q.WindowSize, allocID: q.DomainID,
		headerBase: g.hdrBase, headerSize: hdrSize, name: q.Name, bases: g.bases})
	// Not live until Commit: a kernel that opens it before is refused.
	clear(b[offLive : offLive+4])
	ctx, err := g.chip.Malloc(len(b))
	if err != nil {
		return g.chipError(err)
	}
	g.ctx = ctx
	if err := g.chip.CopyIn(ctx, b); err != nil {
		return g.chipError(err)
	}
	return nil
}

// openHeader opens rank 0's header, retrying while it does not exist yet
// (rank 0's node may still be preparing, or between creating and sizing
// it) until deadline.
func (g *GlobalRank) openHeader(name string, deadline time.Time) error {
	pause := 20 * time.Microsecond
	for {
		o, _, err := openObject(g.req.prefix(), name, headerSize(g.req.Ranks), false)
		if err == nil {
			g.hdr = o
			return nil
		}
		if !errors.Is(err, errNotReady) {
			return g.errorf(kind.RuntimeError, "the header: %v", err)
		}
		if time.Now().After(deadline) {
			return g.errorf(kind.TimeoutError, "waited %v for rank 0's header %s to exist (has rank 0 prepared, and not released?)",
				g.req.Timeout, name)
		}
		time.Sleep(pause)
		pause = min(2*pause, 2*time.Millisecond)
	}
}

// undoImport takes back whatever importTable did, leaving what Prepare
// did. An object is closed only once the chip no longer maps it, so what
// the chip refuses to unmap stays valid memory (and recorded, for
// Release).
func (g *GlobalRank) undoImport() error {
	var errs []error
	if g.ctx != 0 {
		if err := g.chip.Free(g.ctx); err != nil {
			errs = append(errs, err)
		} else {
			g.ctx = 0
		}
	}
	if g.hdrBase != 0 {
		if err := g.chip.UnmapWindow(g.hdrBase); err != nil {
			errs = append(errs, err)
		} else {
			g.hdrBase = 0
		}
	}
	for j, o := range g.peers {
		if o == nil {
			continue
		}
		if g.bases[j] != 0 {
			if err := g.chip.UnmapWindow(g.bases[j]); err != nil {
				errs = append(errs, err)
				continue
			}
			g.bases[j] = 0
		}
		errs = append(errs, o.release())
		g.peers[j] = nil
	}
	if g.hdr != nil && !g.hdrCreated && g.hdrBase == 0 {
		errs = append(errs, g.hdr.release())
		g.hdr = nil
	}
	return errors.Join(errs...)
}

// Commit makes the imported CommContext live: from now on a kernel's Open
// of DeviceCtx succeeds. It fails before Import and after Invalidate or
// Release; a second Commit does nothing.
func (g *GlobalRank) Commit() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.released:
		return g.errorf(kind.RuntimeError, "commit after release")
	case g.invalidated:
		return g.errorf(kind.RuntimeError, "commit after invalidate")
	case !g.imported:
		return g.errorf(kind.RuntimeError, "commit before import")
	case g.committed:
		return nil
	}
	b, err := g.chip.Bytes(g.ctx+offLive, 4)
	if err != nil {
		return g.chipError(err)
	}
	atomic.StoreUint32(futex.Word32(b, 0), 1)
	g.committed = true
	return nil
}

// Invalidate hides the view before a release: the CommContext is marked
// dead (a kernel's Open fails, and so does every call of a View already
// open) and Committed reports false. It may be called at any phase and
// more than once; afterwards the rank can only be released.
func (g *GlobalRank) Invalidate() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.invalidate()
}

func (g *GlobalRank) invalidate() {
	g.invalidated, g.committed = true, false
	if g.ctx == 0 {
		return
	}
	// A failure means the chip is closed: nothing can reach the context.
	if b, err := g.chip.Bytes(g.ctx+offLive, 4); err == nil {
		atomic.StoreUint32(futex.Word32(b, 0), 0)
	}
}

// Release undoes everything for this rank, at any phase: it invalidates
// the view, frees the CommContext, unmaps every window and the header from
// the chip, closes the peers' objects, and unlinks and closes this rank's
// window (rank 0 also unlinks the header's name; ranks that still map it
// keep working until they release). The shm objects go even if the chip
// refuses something; the errors are reported. A second call does nothing
// and returns nil.
//
// No kernel of this rank may still use the domain.
func (g *GlobalRank) Release() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.released {
		return nil
	}
	g.released = true
	g.invalidate()
	if err := g.teardown(); err != nil {
		return fmt.Errorf("comm: releasing global domain %s rank %d: %w", g.req.domain(), g.rank, err)
	}
	return nil
}

// Abort is Release, named for the transaction's failure path: it is valid
// after Prepare, after a failed or partial Import, and after Commit.
func (g *GlobalRank) Abort() error { return g.Release() }

// teardown releases whatever g holds; it also serves a failed Prepare.
func (g *GlobalRank) teardown() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if g.ctx != 0 {
		add(g.chip.Free(g.ctx))
		g.ctx = 0
	}
	if g.hdrBase != 0 {
		add(g.chip.UnmapWindow(g.hdrBase))
		g.hdrBase = 0
	}
	for j, base := range g.bases {
		if base != 0 {
			add(g.chip.UnmapWindow(base))
			g.bases[j] = 0
		}
	}
	for j, o := range g.peers {
		if o != nil {
			add(o.release())
			g.peers[j] = nil
		}
	}
	if g.own != nil {
		add(unlinkOwned(g.own))
		add(g.own.release())
		g.own = nil
	}
	if g.hdr != nil {
		if g.hdrCreated {
			add(unlinkOwned(g.hdr))
		}
		add(g.hdr.release())
		g.hdr = nil
	}
	g.imported = false
	if len(errs) == 0 {
		unclaimPrepared(g.key) // a rank whose objects could not all go stays claimed
	}
	return errors.Join(errs...)
}

// preparedKey names one rank of one generation of a domain made by this
// process: window names carry a random key, so it is this set, not the
// names, that refuses preparing the same rank twice.
type preparedKey struct {
	prefix         string
	id, generation uint64
	rank           int
}

var (
	preparedMu sync.Mutex
	prepared   = map[preparedKey]bool{}
)

func claimPrepared(k preparedKey) bool {
	preparedMu.Lock()
	defer preparedMu.Unlock()
	if prepared[k] {
		return false
	}
	prepared[k] = true
	return true
}

func unclaimPrepared(k preparedKey) {
	preparedMu.Lock()
	defer preparedMu.Unlock()
	delete(prepared, k)
}

// Descriptor is what PrepareGlobal returned.
func (g *GlobalRank) Descriptor() Descriptor { return g.desc }

// Rank is this rank's index in the domain.
func (g *GlobalRank) Rank() int { return g.rank }

// DeviceCtx is the CommContext's device address once Import succeeded (a
// kernel may Open it once Commit made it live), 0 before and after Release.
func (g *GlobalRank) DeviceCtx() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ctx
}

// WindowBase is this rank's window in the chip's address space, from
// Prepare until Release (0 after).
func (g *GlobalRank) WindowBase() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.bases[g.rank]
}

// Bases is every rank's window in the chip's address space, by rank: only
// this rank's is non-zero until Import succeeded.
func (g *GlobalRank) Bases() []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.bases)
}

// Imported reports whether Import succeeded and the rank is not released.
func (g *GlobalRank) Imported() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.imported
}

// Committed reports whether the view is live: Commit succeeded and neither
// Invalidate nor Release has been called since.
func (g *GlobalRank) Committed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.committed
}
