package comm

import (
	"slices"
	"testing"
	"time"

	"simpler/hal/shm"
	"simpler/kind"
)

// handles is the descriptor handles of a domain's table, sorted.
func (d *globalDomain) handles() []string {
	var hs []string
	for _, desc := range d.table {
		hs = append(hs, desc.Handle)
	}
	slices.Sort(hs)
	return hs
}

// A pooled rank's window goes back to the pool at release under its
// name, and the next domain of that size takes it again, zeroed before
// its descriptor is made: the same names, nothing new in /dev/shm, a
// fresh domain id in the CommContext, every window and the header clear.
func TestPooledGlobalWindowsComeBackZeroed(t *testing.T) {
	clean(t)
	chips := openChips(t, 3)
	req := newGlobalReq(3, 4096)
	req.Pooled = true
	d := prepareDomain(t, req, chips, 1)
	d.importAll(t)
	d.commitAll(t)
	for r, g := range d.ranks {
		if _, ok := pooledKey(g.Descriptor().Handle); !ok {
			t.Fatalf("rank %d's handle %q is not a pooled window's name", r, g.Descriptor().Handle)
		}
		if err := chips[r].CopyIn(g.WindowBase(), []byte("dirty window")); err != nil {
			t.Fatal(err)
		}
	}
	barrierRounds(t, d.views(t), chips, 3) // leaves words in the header
	first := d.handles()
	d.release(t)
	d.ranks = nil
	wantBare(t, chips)
	names, _ := shm.Leftovers(shm.Prefix() + "gwin-")
	if gpoolLen() != 3 || len(names) != 4 {
		t.Fatalf("after release: %d idle pooled windows and names %v, want 3 windows and a header", gpoolLen(), names)
	}

	req2 := newGlobalReq(3, 4096)
	req2.Pooled = true
	d2 := prepareDomain(t, req2, chips, 1)
	if got := d2.handles(); !slices.Equal(got, first) {
		t.Fatalf("the second domain's windows %v, want the pooled %v", got, first)
	}
	if again, _ := shm.Leftovers(shm.Prefix() + "gwin-"); !slices.Equal(again, names) {
		t.Fatalf("names %v, want the pool's %v", again, names)
	}
	d2.importAll(t)
	d2.commitAll(t)
	views := d2.views(t)
	for r, v := range views {
		if v.AllocationID() != req2.DomainID {
			t.Errorf("rank %d: allocation id %d, want the new domain's %d", r, v.AllocationID(), req2.DomainID)
		}
		for j := range views {
			base, _ := v.Base(j)
			if b := mustBytes(t, chips[r], base, 4096); slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) {
				t.Fatalf("rank %d sees rank %d's pooled window not zeroed", r, j)
			}
		}
	}
	barrierRounds(t, views, chips, 3) // a header left dirty would break the rounds
	d2.release(t)
	d2.ranks = nil
	if err := DrainPool(); err != nil {
		t.Fatal(err)
	}
	if left, _ := shm.Leftovers(shm.Prefix() + "gwin-"); len(left) != 0 || gpoolLen() != 0 {
		t.Fatalf("after DrainPool: names %v, %d idle", left, gpoolLen())
	}
}

// Rank 0 takes only a window whose header has its domain's size (or that
// never had one): a header's name never comes back at another size.
func TestPooledHeaderKeepsItsSize(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	req := newGlobalReq(2, 4096)
	req.Pooled = true
	d := prepareDomain(t, req, chips, 1)
	d.release(t)
	d.ranks = nil
	big := newGlobalReq(1000, 4096) // another header size
	big.Pooled = true
	g, desc, err := PrepareGlobal(big, 0, chips[0])
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release()
	// The header's object is its words and the page of its seal.
	if slices.Contains(d.handles(), desc.Handle) && len(g.core.hdr.seg.Mem) != sealed(headerSize(1000)) {
		t.Fatalf("rank 0 of 1000 ranks took %s with a %d-byte header", desc.Handle, len(g.core.hdr.seg.Mem))
	}
	if len(g.core.hdr.seg.Mem) != sealed(headerSize(1000)) {
		t.Fatalf("header of %d bytes for 1000 ranks, want %d", len(g.core.hdr.seg.Mem), sealed(headerSize(1000)))
	}
}

// An importer keeps its mapping of a peer's pooled window once its last
// rank lets go of it, and the next open of the name takes that mapping
// back; DrainPool, or the bound, lets it go.
func TestKeptPeerMapping(t *testing.T) {
	clean(t)
	name := pooledWindowName(shm.Prefix(), newGlobalKey())
	owner, err := shm.CreateNamed(name, 4096) // the peer's node, outside the cache
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	o, _, err := openObject(shm.Prefix(), name, 4096, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.release(); err != nil {
		t.Fatal(err)
	}
	if refs(name) != 0 || func() bool { cacheMu.Lock(); defer cacheMu.Unlock(); return cache[name] != o }() {
		t.Fatal("the released peer window was not kept in the cache")
	}
	again, _, err := openObject(shm.Prefix(), name, 4096, false)
	if err != nil || again != o || refs(name) != 1 {
		t.Fatalf("reopening: %v, same mapping %v, refs %d", err, again == o, refs(name))
	}
	if err := again.release(); err != nil {
		t.Fatal(err)
	}
	if err := dropKept(0, 0); err != nil {
		t.Fatal(err)
	}
	cacheMu.Lock()
	_, still := cache[name]
	n := len(kept)
	cacheMu.Unlock()
	if still || n != 0 {
		t.Fatalf("after dropping: cached %v, %d kept", still, n)
	}
}

// A domain over the same members takes back exactly the windows an
// earlier one released (GlobalRequest.Reuse): the same names, zeroed, a
// fresh domain id. A name that is not idle in the pool (in use by a live
// domain, or dropped) is refused with a KeyError and changes nothing, and
// an importer does not wait for a reused header that is gone.
func TestReusePooledWindow(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	req := newGlobalReq(2, 4096)
	req.Pooled = true
	d := prepareDomain(t, req, chips, 1)
	d.importAll(t)
	d.commitAll(t)
	if err := chips[1].CopyIn(d.ranks[1].WindowBase(), []byte("dirty")); err != nil {
		t.Fatal(err)
	}
	old := slices.Clone(d.table)
	d.release(t)
	d.ranks = nil

	reuse := func(r int, q GlobalRequest) (*GlobalRank, Descriptor, error) {
		q.Pooled, q.Reuse, q.ReuseSecret = true, old[r].Handle, NewSecret()
		return PrepareGlobal(q, r, chips[r])
	}
	req2 := newGlobalReq(2, 4096)
	table := make([]Descriptor, 2)
	ranks := make([]*GlobalRank, 2)
	for r := range ranks {
		g, desc, err := reuse(r, req2)
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		t.Cleanup(func() { g.Release() })
		if desc.Handle != old[r].Handle || desc.DomainID != req2.DomainID {
			t.Fatalf("rank %d: descriptor %v, want the window %s of domain %d", r, desc, old[r].Handle, req2.DomainID)
		}
		ranks[r], table[r] = g, desc
	}
	for r, g := range ranks {
		if err := g.Import(table); err != nil {
			t.Fatal(err)
		}
		if err := g.Commit(); err != nil {
			t.Fatal(err)
		}
		v, err := Open(chips[r], g.DeviceCtx())
		if err != nil {
			t.Fatal(err)
		}
		if v.AllocationID() != req2.DomainID {
			t.Fatalf("rank %d: allocation id %d, want %d", r, v.AllocationID(), req2.DomainID)
		}
	}
	if b := mustBytes(t, chips[0], ranks[0].Bases()[1], 4096); slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) {
		t.Fatal("rank 1's reused window is not zeroed")
	}

	// In use by the live domain: refused, the pool as it was.
	idle := gpoolLen()
	if _, _, err := reuse(1, newGlobalReq(2, 4096)); kind.Of(err) != kind.KeyError || gpoolLen() != idle {
		t.Fatalf("reusing a window in use: %v (pool %d, was %d), want a KeyError", err, gpoolLen(), idle)
	}
	for _, g := range ranks {
		if err := g.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if err := DrainPool(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reuse(0, newGlobalReq(2, 4096)); kind.Of(err) != kind.KeyError {
		t.Fatalf("reusing a dropped window: %v, want a KeyError", err)
	}
	// Rank 1 may be taken back alone (a fresh window under a pooled name
	// stands in for it), but rank 0's header is gone: Import fails at once.
	q := newGlobalReq(2, 4096)
	q.Pooled = true
	g1, d1, err := PrepareGlobal(q, 1, chips[1])
	if err != nil {
		t.Fatal(err)
	}
	defer g1.Release()
	start := time.Now()
	stale := []Descriptor{{Profile: ProfileSim, DomainID: q.DomainID, Generation: 1, Rank: 0, Ranks: 2, MappingSize: 4096, Handle: old[0].Handle, Secret: NewSecret()}, d1}
	g1.req.Reuse, g1.req.ReuseSecret = old[1].Handle, d1.Secret // as a reused rank would import
	if err := g1.Import(stale); err == nil || time.Since(start) > q.Timeout/2 {
		t.Fatalf("importing a dropped header: %v after %v, want a prompt failure", err, time.Since(start))
	}
}
