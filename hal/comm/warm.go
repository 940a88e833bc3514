package comm

// Warm slots: a local domain's ranks kept whole after Release — windows,
// peers and header mapped, in the chip too, and the CommContext — so
// that the next allocation of the same slot takes them back without a
// rendezvous and without touching shared memory: each rank clears its
// window and writes its CommContext afresh. A domain whose ranks must meet
// costs a barrier of every rank and a dozen system calls per rank; a warm
// one costs a clear and a copy.
//
// The namespace says which slot (Request.Namespace):
//
//	<base>~<slot>.<gen>    a fresh allocation in slot <slot> of <base>
//	                       (a Worker's namespace), generation <gen>: each
//	                       rank parks on Release instead of tearing down
//	<base>~<slot>.<gen>+   take back the ranks the last allocation of that
//	                       slot and generation parked
//
// Whoever allocates decides, for all ranks at once, whether an allocation
// is fresh or takes a slot back: every rank must do the same, and only the
// allocator knows that the slot's last domain was released by every rank
// (the engine's warm slots, engine/warm.go). A rank asked to take back what
// it has not parked (its process was restarted, DrainPool ran) fails at
// once instead of waiting at a barrier its peers will not join; the
// allocator then releases the ranks that did take theirs back and
// allocates afresh in a new generation. A rank parked under an older
// generation, or for another shape, is torn down when its slot is next
// used.
//
// Taking a slot back keeps the contract of a fresh allocation: a fresh
// allocation id and name in the CommContext, and a zero window. No peer
// stores into it before every rank's Allocate has returned, since a kernel
// gets the domain only after that; that is the caller's part (the engine
// hands a domain out once every rank is allocated).

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"simpler/hal"
	"simpler/internal/futex"
	"simpler/kind"
)

// warmKey finds a parked rank: one per slot and rank in a process.
type warmKey struct {
	prefix, slot string
	rank         int
}

// parkedRank is a rank's whole state between two allocations of its slot.
type parkedRank struct {
	gen  string // the namespace it was allocated in: "<base>~<slot>.<gen>"
	core rankCore
}

var (
	warmMu sync.Mutex
	warm   = map[warmKey]*parkedRank{}
)

// slotOf reads a warm slot's namespace: slot is "<base>~<slot>", gen the
// namespace without the "+", reuse whether the "+" is there. ok is false
// for a plain namespace.
func slotOf(ns string) (slot, gen string, reuse, ok bool) {
	gen, reuse = strings.CutSuffix(ns, "+")
	i := strings.LastIndexByte(gen, '~')
	if i <= 0 {
		return "", "", false, false
	}
	num, g, found := strings.Cut(gen[i+1:], ".")
	if !found || !digits(num) || !digits(g) {
		return "", "", false, false
	}
	return gen[:i+1+len(num)], gen, reuse, true
}

func digits(s string) bool {
	if s == "" || len(s) > 19 {
		return false
	}
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

// WarmNamespace is the namespace of slot slot, generation gen, of a
// Worker's namespace base; with reuse it asks for the parked ranks back.
func WarmNamespace(base string, slot int, gen uint64, reuse bool) string {
	ns := base + "~" + strconv.Itoa(slot) + "." + strconv.FormatUint(gen, 10)
	if reuse {
		ns += "+"
	}
	return ns
}

// takeParked removes and returns the rank parked under k, if any.
func takeParked(k warmKey) *parkedRank {
	warmMu.Lock()
	defer warmMu.Unlock()
	p := warm[k]
	delete(warm, k)
	return p
}

// allocateWarm is Allocate for a namespace that names a warm slot: it
// takes the slot's parked rank back (reuse) or clears the way for a
// fresh allocation. done reports that it answered; otherwise the fresh
// path runs, with the rank parking on release.
func allocateWarm(req Request, rank int, chip hal.Chip) (r *Rank, done bool, err error) {
	slot, gen, reuse, _ := slotOf(req.Namespace)
	p := takeParked(warmKey{req.prefix(), slot, rank})
	if p != nil && (!reuse || p.gen != gen || p.core.size != req.Ranks || p.core.winSize != req.WindowSize || p.core.chip != chip) {
		p.core.teardown() // stale: an older generation or another shape; nothing uses it
		p = nil
	}
	if !reuse {
		return nil, false, nil
	}
	if p == nil {
		return nil, true, kind.Errorf(kind.RuntimeError, "%s rank %d: warm slot %s has no parked rank %d (was its process restarted, or the pool drained?)", req.what(), rank, gen, rank)
	}
	r = &Rank{Rank: rank, Size: req.Ranks, WindowSize: req.WindowSize, req: req, core: p.core, joined: true}
	r.req.Namespace = gen // release parks it under its generation again
	c := &r.core
	c.name, c.id = req.Name, req.AllocationID
	if err := c.rewrite(); err != nil {
		return nil, true, errors.Join(err, c.teardown())
	}
	r.DeviceCtx, r.WindowBase = c.ctx, c.bases[rank]
	r.Bases = append([]uint64(nil), c.bases...)
	return r, true, nil
}

// rewrite makes a parked core the rank of a new allocation: the window
// cleared, the CommContext written with the new id and name (dead while
// it is written), then live.
func (c *rankCore) rewrite() error {
	clear(c.own.seg.Mem[:c.winSize])
	b := encodeCtx(ctxFields{rank: c.rank, size: c.size, windowSize: c.winSize, allocID: c.id,
		headerBase: c.hdrBase, headerSize: headerSize(c.size), name: c.name, bases: c.bases})
	clear(b[offLive : offLive+4])
	if len(b) != c.ctxLen { // the name's length changed
		if err := c.chip.Free(c.ctx); err != nil {
			return c.chipError(err)
		}
		c.ctx, c.ctxLen = 0, 0
		ctx, err := c.chip.Malloc(len(b))
		if err != nil {
			return c.chipError(err)
		}
		c.ctx, c.ctxLen = ctx, len(b)
	}
	if err := c.chip.CopyIn(c.ctx, b); err != nil {
		return c.chipError(err)
	}
	if err := c.setLive(1); err != nil {
		return c.chipError(err)
	}
	return nil
}

// park keeps the released rank r for its slot, if it can be: every step
// of its allocation done and nothing of a kernel left in the header (no
// barrier round half full, no waiter counted). It reports whether it did;
// if not, the caller tears the rank down.
func (r *Rank) park() bool {
	_, gen, _, ok := slotOf(r.req.Namespace)
	c := &r.core
	if !ok || !r.joined || c.own == nil || c.hdr == nil || c.ctx == 0 {
		return false
	}
	hdr := c.hdr.seg.Mem
	if atomic.LoadUint32(futex.Word32(hdr, hdrBarrier))&0xffff != 0 ||
		atomic.LoadUint32(futex.Word32(hdr, rankWord(c.rank, rankSleepers))) != 0 {
		return false
	}
	if c.setLive(0) != nil {
		return false
	}
	// Nothing of the domain may stay under its names: this rank's window
	// loses its name now (the header's went once every rank had joined),
	// and the peers' objects leave the cache under theirs.
	if c.own.retire() != nil {
		return false
	}
	for _, o := range c.peers {
		if o != nil {
			o.uncache()
		}
	}
	slot, _, _, _ := slotOf(gen)
	k := warmKey{r.req.prefix(), slot, c.rank}
	p := &parkedRank{gen: gen, core: *c}
	*c = rankCore{released: true, rank: c.rank, name: c.name, id: c.id, global: c.global, gen: c.gen}
	warmMu.Lock()
	old := warm[k]
	warm[k] = p
	warmMu.Unlock()
	if old != nil { // cannot happen while allocations of a slot take it out first
		old.core.teardown()
	}
	return true
}

// uncache takes o out of the cache, keeping it mapped for whoever holds
// it: a parked rank keeps its peers' windows under no name.
func (o *object) uncache() {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if cache[o.key] == o {
		delete(cache, o.key)
	}
}

// DropWarm tears down every rank parked under prefix by the slots of
// namespace base (a Worker's), as that Worker closes: before its chips
// go, since parked ranks are mapped in them.
func DropWarm(prefix, base string) error {
	return dropParked(func(k warmKey) bool { return k.prefix == prefix && strings.HasPrefix(k.slot, base+"~") })
}

// dropParked tears down the parked ranks whose key match selects.
func dropParked(match func(warmKey) bool) error {
	warmMu.Lock()
	var drop []*parkedRank
	for k, p := range warm {
		if match(k) {
			drop = append(drop, p)
			delete(warm, k)
		}
	}
	warmMu.Unlock()
	var errs []error
	for _, p := range drop {
		errs = append(errs, p.core.teardown())
	}
	return errors.Join(errs...)
}

// warmLen reports the number of parked ranks (for tests).
func warmLen() int {
	warmMu.Lock()
	defer warmMu.Unlock()
	return len(warm)
}
