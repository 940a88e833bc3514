package comm

// Global domains: the per-node primitives of a domain whose ranks are
// hosted by several nodes (separate processes, possibly separate daemons),
// brought up by a broker that runs a transaction node by node. This file
// knows nothing of the broker. For each of its local ranks a node calls
//
//	PrepareGlobal  make the rank's window (zeroed), seal it with a fresh
//	               secret (seal.go) and map it into the chip; export its
//	               Descriptor, which carries the secret
//	Import         given the complete rank-ordered table of descriptors,
//	               check every peer's window and the domain's header
//	               against its descriptor's secret, then
//	               map every peer's window and the domain's header into the
//	               chip and write the CommContext (not yet live)
//	Commit         make the CommContext live: kernels may Open it
//	Invalidate     make it dead again, before releasing
//	Release/Abort  undo everything, at any phase
//
// The windows, the header, the CommContext and their undoing are the rank
// core's (rank.go), as for a local domain; this file adds the phases and
// their state. The request and the names are in global_names.go.

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"simpler/hal"
	"simpler/kind"
)

// GlobalRank is one rank's part of a global domain on one chip, from
// PrepareGlobal to Release. Its methods are safe for concurrent use; they
// serialise, so an Import waiting for the header holds up the others.
type GlobalRank struct {
	req  GlobalRequest
	desc Descriptor
	key  preparedKey

	mu          sync.Mutex
	imported    bool
	committed   bool
	invalidated bool
	broken      error   // an Import's rollback failed: only Release is left
	spare       *object // a pooled window's header, unused by this rank (not rank 0)

	// core: own window and (rank 0) header from Prepare; peers, the
	// others' header, the mappings and the CommContext from Import.
	core  rankCore
	table []Descriptor
}

// PrepareGlobal sets up rank's window of a global domain on chip: it
// creates the window's shm object (fresh, so zeroed; exclusively, so a
// reused name fails), seals it with a secret drawn now (or
// req.ReuseSecret), maps it into chip, and for rank 0 also creates the
// domain's header, sealed with the same secret. It returns the rank and
// the descriptor to export, which alone carries the secret. There is no
// barrier: it waits for nobody. On failure nothing is left behind.
func PrepareGlobal(req GlobalRequest, rank int, chip hal.Chip) (*GlobalRank, Descriptor, error) {
	dom := req.domain()
	if err := req.check("comm: preparing global domain "+dom, rank, chip); err != nil {
		return nil, Descriptor{}, err
	}
	key := preparedKey{req.prefix(), req.DomainID, req.Generation, rank}
	if !claimPrepared(key) {
		return nil, Descriptor{}, kind.Errorf(kind.RuntimeError, "comm: global domain %s rank %d is already prepared in this process (file exists): a retry takes a new generation", dom, rank)
	}
	g := &GlobalRank{req: req, key: key,
		core: newRankCore(chip, req.prefix(), req.Name, req.DomainID, rank, req.Ranks, req.WindowSize)}
	g.core.global, g.core.gen = true, req.Generation
	if err := g.prepare(); err != nil {
		if terr := g.teardown(); terr != nil {
			err = fmt.Errorf("%w (undoing it: %v)", err, terr)
		}
		return nil, Descriptor{}, err
	}
	return g, g.desc, nil
}

// prepare makes the objects this rank owns: fresh, or from the pool of
// global windows if the request is pooled (global_pool.go).
func (g *GlobalRank) prepare() error {
	q, c := &g.req, &g.core
	if q.Pooled {
		if err := g.preparePooled(); err != nil {
			return err
		}
		return g.export()
	}
	window := q.windowName(newGlobalKey(), c.rank)
	if c.rank == 0 {
		size := sealed(headerSize(q.Ranks))
		o, err := createObject(c.prefix, globalHeaderOf(window), size, size, false)
		if err != nil {
			return c.errorf(kind.RuntimeError, "creating the header: %v", err)
		}
		c.hdr, c.hdrOwned = o, true
	}
	if err := c.makeWindow(window, false); err != nil {
		return c.errorf(kind.RuntimeError, "creating the window: %v", err)
	}
	return g.export()
}

// export seals the rank's window (and rank 0's header) with the rank's
// secret, maps the window into the chip and makes the descriptor. The
// seal goes on before the descriptor exists: nobody can ask for the
// window before it.
func (g *GlobalRank) export() error {
	q, c := &g.req, &g.core
	secret := q.ReuseSecret
	if q.Reuse == "" {
		secret = NewSecret()
	}
	st := g.stamp(sealWindow, c.rank)
	sealOwn(c.own, seal{st, secret})
	if c.rank == 0 {
		sealOwn(c.hdr, seal{g.stamp(sealHeader, 0), secret})
	}
	if err := c.mapWindow(c.rank); err != nil {
		return err
	}
	g.desc = Descriptor{
		Profile: ProfileSim, DomainID: q.DomainID, Generation: q.Generation,
		Rank: uint32(c.rank), Ranks: uint32(q.Ranks), MappingSize: uint64(q.WindowSize),
		Handle: c.own.seg.Name, Secret: secret,
	}
	return nil
}

// stamp is what the seal of rank's window (what: sealWindow) or of the
// header (sealHeader, rank 0) of this domain says.
func (g *GlobalRank) stamp(what uint64, rank int) sealStamp {
	q := &g.req
	payload := q.WindowSize
	if what == sealHeader {
		payload = headerSize(q.Ranks)
	}
	return sealStamp{id: q.DomainID, gen: q.Generation, what: what,
		rank: uint64(rank), ranks: uint64(q.Ranks), payload: uint64(payload)}
}

// Import brings the rank into the domain described by table, the
// descriptors of all ranks in rank order, as exported by every node's
// PrepareGlobal. It checks the table (one descriptor per rank at its index,
// all of this domain, generation, profile and window size, with window
// names of the domain, and this rank's own entry exactly as Prepare
// returned it), opens every peer's window by name (they must exist: every
// Prepare precedes every Import), opens the header (rank 0's, waiting up to
// Timeout for it to exist), checks every one's seal against its
// descriptor (seal.go: an object whose seal is not of this domain, rank
// and generation with the descriptor's secret is closed again and
// refused, naming the rank, before anything is mapped), maps all of them
// into the chip and writes the CommContext, not yet live: Commit makes it
// so.
//
// Import is atomic: on failure everything it mapped is unmapped and
// everything it opened is closed, and the rank is as Prepare left it, ready
// for another Import. After a successful Import, another with an equal
// table does nothing and returns nil; one with a different table is
// refused and changes nothing. Import after Invalidate or Release fails.
func (g *GlobalRank) Import(table []Descriptor) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := &g.core
	switch {
	case c.released:
		return c.errorf(kind.RuntimeError, "import after release")
	case g.broken != nil:
		return c.errorf(kind.RuntimeError, "an earlier import could not be undone (%v); release the rank", g.broken)
	case g.invalidated:
		return c.errorf(kind.RuntimeError, "import after invalidate")
	case g.imported:
		if slices.Equal(table, g.table) {
			return nil
		}
		return c.errorf(kind.RuntimeError, "already imported with a different table (%s); refusing the new one", tableDiff(g.table, table))
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
			if had[j].Secret != got[j].Secret {
				return fmt.Sprintf("descriptor %d carries another secret", j)
			}
			return fmt.Sprintf("descriptor %d is %v, had %v", j, got[j], had[j])
		}
	}
	return "equal"
}

func (g *GlobalRank) checkTable(table []Descriptor) error {
	q, c := &g.req, &g.core
	if len(table) != q.Ranks {
		return c.errorf(kind.ValueError, "the table has %d descriptors for %d ranks", len(table), q.Ranks)
	}
	for j, d := range table {
		bad := func(format string, args ...any) error {
			return c.errorf(kind.ValueError, "descriptor %d of the table: "+format, append([]any{j}, args...)...)
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
		case d.Secret.IsZero():
			return bad("it carries no secret")
		}
		// A pooled name first: the common case, and the cheaper check (every
		// rank of a node checks every descriptor: 1M checks at 1024 ranks).
		if pooledName(d.Handle) {
			continue
		}
		if _, ok := q.windowKey(d.Handle, j); !ok {
			return bad("handle %q is not the name of rank %d's window of this domain", d.Handle, j)
		}
	}
	if table[c.rank] != g.desc {
		if table[c.rank].Secret != g.desc.Secret {
			return c.errorf(kind.ValueError, "descriptor %d of the table carries another secret than this rank's", c.rank)
		}
		return c.errorf(kind.ValueError, "descriptor %d of the table is %v, but this rank prepared %v", c.rank, table[c.rank], g.desc)
	}
	return nil
}

// importTable does Import's work on a checked table: the header, if this
// rank did not create it, then every peer's window, each checked against
// its descriptor's secret before the core's attach maps anything.
func (g *GlobalRank) importTable(table []Descriptor) error {
	c := &g.core
	start := time.Now()
	if c.hdr == nil {
		if err := g.openHeader(globalHeaderOf(table[0].Handle), table[0].Secret, start); err != nil {
			return err
		}
	}
	names := make([]string, len(table))
	for j, d := range table {
		names[j] = d.Handle
		if j != c.rank {
			if err := g.openPeer(j, d, start); err != nil {
				return err
			}
		}
	}
	return c.attach(names, g.peerError)
}

// sealDeadline is how long an import looks again at a peer window's seal
// that is not whole (being rewritten): a reused window's (REATTACH, where
// its owner reseals it at the same time) up to Timeout; otherwise every
// Prepare has sealed its objects before the table exists, and one look
// decides.
func (g *GlobalRank) sealDeadline(start time.Time) time.Time {
	if g.reattach() {
		return start.Add(g.req.Timeout)
	}
	return start
}

// reattach says whether this rank's import is a REATTACH's (seal.go).
func (g *GlobalRank) reattach() bool { return g.req.Reuse != "" }

// openPeer opens peer j's window by the descriptor's name and checks its
// seal; a refused window is closed again (discard) and never recorded.
func (g *GlobalRank) openPeer(j int, d Descriptor, start time.Time) error {
	c := &g.core
	o, _, err := openObject(c.prefix, d.Handle, c.windowObject(), false)
	if err != nil {
		return g.peerError(j, d.Handle, err)
	}
	if err := awaitSeal(o, c.winSize, g.stamp(sealWindow, j), d.Secret, g.reattach(), g.sealDeadline(start)); err != nil {
		what := fmt.Sprintf("the window of rank %d (%s)", j, d.Handle)
		return errors.Join(g.sealError(what, err, g.reattach()), o.discard())
	}
	c.peers[j] = o
	return nil
}

// sealError words a refused seal: never a secret, only whose object it is.
// waited says whether the import looked again until Timeout.
func (g *GlobalRank) sealError(what string, err error, waited bool) error {
	if errors.Is(err, errSealTimeout) && waited {
		return g.core.errorf(kind.TimeoutError, "%s was not sealed for this domain within %v", what, g.req.Timeout)
	}
	return g.core.errorf(kind.ValueError, "%s is not the one its descriptor names (another domain's, rank's or generation's, or another secret): refused", what)
}

// openHeader opens rank 0's header, waiting while it does not exist yet
// (rank 0's node may still be preparing, or between creating and sizing
// it), for up to this node's Timeout, and checks its seal against rank 0's
// secret.
func (g *GlobalRank) openHeader(name string, secret Secret, start time.Time) error {
	c := &g.core
	deadline := start.Add(g.req.Timeout)
	if g.req.Reuse != "" {
		deadline = start // one try: a pooled header exists already or never again
	}
	payload := headerSize(c.size)
	o, _, err := awaitObject(c.prefix, name, sealed(payload), false, deadline)
	if errors.Is(err, errNotReady) {
		return c.errorf(kind.TimeoutError, "waited %v for rank 0's header %s to exist (has rank 0 prepared, and not released?)",
			g.req.Timeout, name)
	} else if err != nil {
		return c.errorf(kind.RuntimeError, "the header: %v", err)
	}
	// A fresh header exists a moment before rank 0 seals it: look again
	// until the same deadline (or, reused, until Timeout).
	if err := awaitSeal(o, payload, g.stamp(sealHeader, 0), secret, g.reattach(), start.Add(g.req.Timeout)); err != nil {
		return errors.Join(g.sealError("rank 0's header ("+name+")", err, true), o.discard())
	}
	c.hdr = o
	return nil
}

// peerError words a peer's window that could not be opened: its name came
// from the table, and every Prepare precedes every Import.
func (g *GlobalRank) peerError(j int, name string, err error) error {
	if errors.Is(err, errNotReady) {
		return g.core.errorf(kind.RuntimeError, "the window of rank %d (%s) does not exist or is smaller than %d bytes (was rank %d released?)",
			j, name, g.core.windowObject(), j)
	}
	return g.core.errorf(kind.RuntimeError, "the window of rank %d: %v", j, err)
}

// undoImport takes back whatever importTable did, leaving what Prepare
// did: the core's detach, and the header if this import opened it and the
// chip no longer maps it.
func (g *GlobalRank) undoImport() error {
	c := &g.core
	err := c.detach()
	if c.hdr != nil && !c.hdrOwned && c.hdrBase == 0 {
		err = errors.Join(err, c.hdr.release())
		c.hdr = nil
	}
	return err
}

// Commit makes the imported CommContext live: from now on a kernel's Open
// of DeviceCtx succeeds. It fails before Import and after Invalidate or
// Release; a second Commit does nothing.
func (g *GlobalRank) Commit() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := &g.core
	switch {
	case c.released:
		return c.errorf(kind.RuntimeError, "commit after release")
	case g.invalidated:
		return c.errorf(kind.RuntimeError, "commit after invalidate")
	case !g.imported:
		return c.errorf(kind.RuntimeError, "commit before import")
	case g.committed:
		return nil
	}
	if err := c.setLive(1); err != nil {
		return c.chipError(err)
	}
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
	// A failure means the chip is closed: nothing can reach the context.
	_ = g.core.setLive(0)
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
	return g.core.release(func() string { return "global domain " + g.req.domain() }, func() error {
		g.invalidate()
		return g.teardown()
	})
}

// Abort is Release, named for the transaction's failure path: it is valid
// after Prepare, after a failed or partial Import, and after Commit.
func (g *GlobalRank) Abort() error { return g.Release() }

// teardown releases whatever g holds; it also serves a failed Prepare.
// A pooled rank's window (and header, or the spare one its window
// carries) go back to the pool once the chip has let go of them.
func (g *GlobalRank) teardown() error {
	var w gwin
	if c := &g.core; g.req.Pooled && c.own != nil {
		w = gwin{prefix: c.prefix, win: c.own, hdr: g.spare}
		if c.hdrOwned {
			w.hdr = c.hdr
			c.hdr, c.hdrOwned = nil, false
		}
		c.own, g.spare = nil, nil
		w.idle() // no descriptor opens it while it waits in the pool
	}
	err := g.core.teardown()
	if w.win != nil {
		if err == nil {
			err = gpoolPut(w)
		} else {
			err = errors.Join(err, w.drop()) // the chip may still map it
		}
	}
	g.imported = false
	if err == nil {
		unclaimPrepared(g.key) // a rank whose objects could not all go stays claimed
	}
	return err
}

// Descriptor is what PrepareGlobal returned.
func (g *GlobalRank) Descriptor() Descriptor { return g.desc }

// Rank is this rank's index in the domain.
func (g *GlobalRank) Rank() int { return g.core.rank }

// DeviceCtx is the CommContext's device address once Import succeeded (a
// kernel may Open it once Commit made it live), 0 before and after Release.
func (g *GlobalRank) DeviceCtx() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.core.ctx
}

// WindowBase is this rank's window in the chip's address space, from
// Prepare until Release (0 after).
func (g *GlobalRank) WindowBase() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.core.bases[g.core.rank]
}

// Bases is every rank's window in the chip's address space, by rank: only
// this rank's is non-zero until Import succeeded.
func (g *GlobalRank) Bases() []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.core.bases)
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

// preparePooled takes the rank's window (and for rank 0 the domain's
// header) from the pool, cleared, or makes them under a pooled name.
func (g *GlobalRank) preparePooled() error {
	q, c := &g.req, &g.core
	hdrSize := 0 // the header's object, with its seal page; 0: no header
	if c.rank == 0 {
		hdrSize = sealed(headerSize(q.Ranks))
	}
	if q.Reuse != "" {
		return g.reusePooled(hdrSize)
	}
	w, ok := gpoolTake(c.prefix, sealed(q.WindowSize), hdrSize)
	if !ok {
		if err := c.makeWindow(pooledWindowName(c.prefix, newGlobalKey()), false); err != nil {
			return c.errorf(kind.RuntimeError, "creating the window: %v", err)
		}
	} else {
		// Zero before the descriptor names it to anyone (the contract); the
		// seal stays idle until export reseals it.
		clearPayload(w.win)
		c.own = w.win
	}
	switch {
	case c.rank != 0:
		g.spare = w.hdr // travels with its window, unused here
	case w.hdr != nil:
		clearPayload(w.hdr)
		c.hdr, c.hdrOwned = w.hdr, true
	default:
		o, err := createObject(c.prefix, globalHeaderOf(c.own.seg.Name), hdrSize, hdrSize, false)
		if err != nil {
			return c.errorf(kind.RuntimeError, "creating the header: %v", err)
		}
		c.hdr, c.hdrOwned = o, true
	}
	return nil
}

// reusePooled takes back the pooled window q.Reuse names, cleared, with
// its header for rank 0 (hdrSize > 0), which it must have at that size.
func (g *GlobalRank) reusePooled(hdrSize int) error {
	q, c := &g.req, &g.core
	w, ok := gpoolTakeNamed(c.prefix, q.Reuse, sealed(q.WindowSize), hdrSize)
	if !ok {
		return c.errorf(kind.KeyError, "the pooled window %s is not idle in this process at %d bytes%s (taken by another domain, or dropped)",
			q.Reuse, roundPage(q.WindowSize), map[bool]string{true: " with a header", false: ""}[hdrSize > 0])
	}
	// Zero before the domain is usable anywhere (the contract).
	clearPayload(w.win)
	c.own = w.win
	if c.rank == 0 {
		clearPayload(w.hdr)
		c.hdr, c.hdrOwned = w.hdr, true
	} else {
		g.spare = w.hdr
	}
	return nil
}

// pooledName reports whether handle is a pooled window's name.
func pooledName(handle string) bool {
	_, ok := pooledKey(handle)
	return ok
}

// PooledName reports whether handle, a descriptor's, names a pooled
// window: one its node keeps across domains, which a later domain over
// the same members may take back (GlobalRequest.Reuse).
func PooledName(handle string) bool { return pooledName(handle) }
