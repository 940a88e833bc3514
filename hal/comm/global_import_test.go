package comm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"simpler/hal"
	"simpler/hal/shm"
)

func TestGlobalImportIsAtomic(t *testing.T) {
	clean(t)
	chips := openChips(t, 4)
	req := newGlobalReq(4, 4096)
	d := prepareDomain(t, req, chips, 2)
	g, chip := d.ranks[1], chips[1]
	before := liveOf(chip)
	hdrName := globalHeaderOf(d.table[0].Handle)

	// The third peer mapping fails: the two before it are taken back.
	var calls int
	var mapped []uint64
	testHookMapPeer = func(rank, peer int) error {
		if rank != 1 {
			return nil
		}
		if calls++; calls == 3 {
			mapped = slices.Clone(g.core.bases) // g.mu is held by Import: read directly
			return errors.New("injected")
		}
		return nil
	}
	t.Cleanup(func() { testHookMapPeer = nil })
	err := g.Import(d.table)
	wantErrPrefix(t, err, fmt.Sprintf("RuntimeError: comm: global domain \"gtest\" (id %d, generation 1) rank 1: mapping the window of rank 3: injected", req.DomainID))
	testHookMapPeer = nil
	if calls != 3 {
		t.Fatalf("%d peer mappings tried, want 3", calls)
	}
	if got := liveOf(chip); got != before {
		t.Errorf("chip after the failed import: %+v, before it %+v", got, before)
	}
	if n := len(slices.DeleteFunc(mapped, func(b uint64) bool { return b == 0 })); n != 3 {
		t.Fatalf("%d windows mapped when the third peer failed, want own and 2 peers", n)
	}
	for j, base := range mapped {
		if j != 1 && base != 0 {
			if _, err := chip.Bytes(base, 1); err == nil {
				t.Errorf("rank %d's window is still mapped at %#x", j, base)
			}
		}
	}
	assertPrepared(t, g, chip)
	// Every other rank's window and the header are held by their owners
	// only: the failed import closed what it opened.
	for j := range 4 {
		if n := refs(d.table[j].Handle); n != 1 {
			t.Errorf("rank %d's window has %d holders, want its owner", j, n)
		}
	}
	if n := refs(hdrName); n != 1 {
		t.Errorf("the header has %d holders", n)
	}

	// A failure while opening: rank 3's window under a name that does not
	// exist (a well-formed one, so the table passes the checks).
	bad := slices.Clone(d.table)
	bad[3].Handle = "simpler-0-" + globalWindowSuffix(req.DomainID, req.Generation, newGlobalKey(), 3)
	err = g.Import(bad)
	if err == nil || !strings.Contains(err.Error(), "the window of rank 3 (simpler-0-gdom-") {
		t.Errorf("import of a missing window: %v", err)
	}
	if got := liveOf(chip); got != before {
		t.Errorf("chip after the failed open: %+v, before it %+v", got, before)
	}
	if n := refs(d.table[0].Handle) + refs(d.table[2].Handle) + refs(hdrName); n != 3 {
		t.Errorf("peers opened before the failure still held: %d holders", n)
	}
	assertPrepared(t, g, chip)

	wantRetrySucceeds(t, d, 1, before)
}

// wantRetrySucceeds imports rank's table again after failed imports:
// it maps every peer once (the chip holds the context, the peers and the
// header more than before), then the other ranks import, and the domain
// works and goes.
func wantRetrySucceeds(t *testing.T, d *globalDomain, rank int, before live) {
	t.Helper()
	req, chips, g, chip := d.req, d.chips, d.ranks[rank], d.chips[rank]
	if err := g.Import(d.table); err != nil {
		t.Fatal(err)
	}
	if got := liveOf(chip); got != (live{before.allocs + 1, before.windows + 4}) {
		t.Errorf("chip after the import: %+v, before %+v: want the context, 3 peers and the header more", got, before)
	}
	for j := range 4 {
		want := 1
		if j != rank {
			want = 2
		}
		if n := refs(d.table[j].Handle); n != want {
			t.Errorf("rank %d's window has %d holders, want %d", j, n, want)
		}
	}
	// The other ranks import too; the domain works.
	for r, rk := range d.ranks {
		if r != rank {
			if err := rk.Import(d.table); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.commitAll(t)
	barrierRounds(t, d.views(t), chips, 3)
	d.release(t)
	wantGone(t, req, chips)
}

// assertPrepared checks that g is as Prepare left it.
func assertPrepared(t *testing.T, g *GlobalRank, chip hal.Chip) {
	t.Helper()
	if g.Imported() || g.DeviceCtx() != 0 {
		t.Errorf("after a failed import: imported %v, ctx %#x", g.Imported(), g.DeviceCtx())
	}
	bases := g.Bases()
	for j, b := range bases {
		if (b != 0) != (j == g.Rank()) {
			t.Errorf("after a failed import the bases are %#x", bases)
			break
		}
	}
	if _, err := chip.Bytes(g.WindowBase(), 1); err != nil {
		t.Errorf("own window: %v", err)
	}
}

func TestGlobalImportChecksTable(t *testing.T) {
	clean(t)
	chips := openChips(t, 3)
	req := newGlobalReq(3, 4096)
	d := prepareDomain(t, req, chips, 3)
	g := d.ranks[1]
	before := liveOf(chips[1])
	id := req.DomainID
	with := func(j int, f func(*Descriptor)) []Descriptor {
		tab := slices.Clone(d.table)
		f(&tab[j])
		return tab
	}
	cases := []struct {
		name  string
		table []Descriptor
		want  string
	}{
		{"short", d.table[:2], "the table has 2 descriptors for 3 ranks"},
		{"long", append(slices.Clone(d.table), d.table[0]), "the table has 4 descriptors for 3 ranks"},
		{"out of order", []Descriptor{d.table[0], d.table[2], d.table[1]}, "descriptor 1 of the table: it is rank 2's; the table must be in rank order"},
		{"other generation", with(2, func(x *Descriptor) { x.Generation = 2 }),
			fmt.Sprintf("descriptor 2 of the table: domain %d generation 2, want domain %d generation 1", id, id)},
		{"other domain", with(0, func(x *Descriptor) { x.DomainID++ }),
			fmt.Sprintf("descriptor 0 of the table: domain %d generation 1, want domain %d generation 1", id+1, id)},
		{"profile", with(0, func(x *Descriptor) { x.Profile = 2 }), "descriptor 0 of the table: profile profile(2), want sim"},
		{"rank count", with(2, func(x *Descriptor) { x.Ranks = 4 }), "descriptor 2 of the table: 4 ranks, want 3"},
		{"mapping size", with(0, func(x *Descriptor) { x.MappingSize = 8192 }), "descriptor 0 of the table: mapping size 8192, want 4096"},
		{"another rank's window", with(2, func(x *Descriptor) { x.Handle = d.table[0].Handle }), "is not the name of rank 2's window of this domain"},
		{"not simpler's", with(0, func(x *Descriptor) { x.Handle = strings.Replace(x.Handle, "simpler-", "other-", 1) }), "is not the name of rank 0's window"},
		{"a path", with(0, func(x *Descriptor) { x.Handle = "simpler-/../" + globalWindowSuffix(id, 1, newGlobalKey(), 0) }), "is not the name of rank 0's window"},
		{"a short key", with(0, func(x *Descriptor) { x.Handle = "simpler-1-" + globalWindowSuffix(id, 1, "00ff", 0) }), "is not the name of rank 0's window"},
		{"a key not in hex", with(0, func(x *Descriptor) {
			x.Handle = "simpler-1-" + globalWindowSuffix(id, 1, strings.Repeat("g", globalKeyLen), 0)
		}), "is not the name of rank 0's window"},
		{"not ours", with(1, func(x *Descriptor) { x.Handle = "simpler-1-" + globalWindowSuffix(id, 1, newGlobalKey(), 1) }),
			"descriptor 1 of the table is {sim domain"},
	}
	for _, c := range cases {
		err := g.Import(c.table)
		if err == nil || !strings.HasPrefix(err.Error(), "ValueError: comm: global domain") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\n  want %q", c.name, err, c.want)
		}
		if got := liveOf(chips[1]); got != before {
			t.Errorf("%s: chip %+v, before %+v", c.name, got, before)
		}
	}
	assertPrepared(t, g, chips[1])
	d.importAll(t)
	d.commitAll(t)
	d.release(t)
	wantGone(t, req, chips)
}

func TestGlobalImportIdempotent(t *testing.T) {
	clean(t)
	d := preparedDomain(t, 2)
	req, chips := d.req, d.chips
	d.importAll(t)
	g := d.ranks[0]
	ctx, bases, before := g.DeviceCtx(), g.Bases(), liveOf(chips[0])
	if err := g.Import(slices.Clone(d.table)); err != nil {
		t.Errorf("a second import of the same table: %v", err)
	}
	// A conflicting table, even a well-formed one, is refused.
	other := slices.Clone(d.table)
	other[1].Handle = "simpler-1-" + globalWindowSuffix(req.DomainID, req.Generation, newGlobalKey(), 1)
	err := g.Import(other)
	if err == nil || !strings.Contains(err.Error(), "already imported with a different table (descriptor 1 is {sim") {
		t.Errorf("a conflicting import: %v", err)
	}
	err = g.Import(d.table[:1])
	if err == nil || !strings.Contains(err.Error(), "already imported with a different table (1 descriptors, had 2)") {
		t.Errorf("a conflicting import: %v", err)
	}
	if g.DeviceCtx() != ctx || !slices.Equal(g.Bases(), bases) || liveOf(chips[0]) != before || !g.Imported() {
		t.Errorf("a repeated import changed the rank: ctx %#x→%#x, bases %#x→%#x, chip %+v→%+v",
			ctx, g.DeviceCtx(), bases, g.Bases(), before, liveOf(chips[0]))
	}
	d.commitAll(t)
	if err := g.Commit(); err != nil {
		t.Errorf("a second commit: %v", err)
	}
	if err := g.Import(d.table); err != nil {
		t.Errorf("import after commit of the same table: %v", err)
	}
	views := d.views(t)
	b1, _ := views[0].Base(1)
	if err := views[0].Notify(1, b1, 8, 3, "set"); err != nil {
		t.Fatal(err)
	}
	if got, err := views[1].Wait(d.ranks[1].WindowBase(), 8, 3, "==", 20*time.Second); err != nil {
		t.Errorf("after the repeated imports: %d, %v", got, err)
	}
	d.release(t)
	wantGone(t, req, chips)
}

// Rank 0 gone before a peer imports: the peer waits for the header only
// until its timeout, and is left as prepared.
func TestGlobalImportHeaderTimeout(t *testing.T) {
	clean(t)
	d := preparedDomain(t, 2)
	req, chips := d.req, d.chips
	if err := d.ranks[0].Abort(); err != nil {
		t.Fatal(err)
	}
	d.ranks[1].req.Timeout = 50 * time.Millisecond // this node's own bound
	start := time.Now()
	err := d.ranks[1].Import(d.table)
	wantErrPrefix(t, err, fmt.Sprintf("TimeoutError: comm: global domain \"gtest\" (id %d, generation 1) rank 1: waited 50ms for rank 0's header %s",
		req.DomainID, globalHeaderOf(d.table[0].Handle)))
	if el := time.Since(start); el < 50*time.Millisecond || el > 10*time.Second {
		t.Errorf("gave up after %v", el)
	}
	assertPrepared(t, d.ranks[1], chips[1])
	if got := liveOf(chips[1]); got != (live{0, 1}) {
		t.Errorf("chip %+v", got)
	}
	d.release(t)
	wantGone(t, req, chips)
}

// ---- invalidate, release, abort ----

func TestGlobalInvalidate(t *testing.T) {
	clean(t)
	d := committedDomain(t, 2)
	req, chips := d.req, d.chips
	views := d.views(t)
	g := d.ranks[1]
	g.Invalidate()
	g.Invalidate()
	if g.Committed() {
		t.Error("committed after invalidate")
	}
	if _, err := Open(chips[1], g.DeviceCtx()); err == nil {
		t.Error("an invalidated context opens")
	}
	wantErr(t, views[1].Barrier(time.Second), "RuntimeError: comm.barrier: domain \"gtest\" rank 1 was released")
	if err := g.Commit(); err == nil || !strings.Contains(err.Error(), "commit after invalidate") {
		t.Errorf("commit after invalidate: %v", err)
	}
	if err := g.Import(d.table); err == nil || !strings.Contains(err.Error(), "import after invalidate") {
		t.Errorf("import after invalidate: %v", err)
	}
	// The other rank is untouched.
	if !d.ranks[0].Committed() {
		t.Error("rank 0 lost its commit")
	}
	if err := views[0].Notify(0, d.ranks[0].WindowBase(), 8, 1, "set"); err != nil {
		t.Error(err)
	}
	d.release(t)
	if err := g.Commit(); err == nil || !strings.Contains(err.Error(), "commit after release") {
		t.Errorf("commit after release: %v", err)
	}
	if err := g.Import(d.table); err == nil || !strings.Contains(err.Error(), "import after release") {
		t.Errorf("import after release: %v", err)
	}
	wantGone(t, req, chips)
}

func TestGlobalAbort(t *testing.T) {
	phases := []struct {
		name string
		// reach brings the domain to the phase; it may leave ranks in
		// different phases, as a transaction that failed midway does.
		reach func(t *testing.T, d *globalDomain)
	}{
		{"after prepare", func(t *testing.T, d *globalDomain) {}},
		{"after partial import", func(t *testing.T, d *globalDomain) {
			for _, g := range d.ranks[:2] {
				if err := g.Import(d.table); err != nil {
					t.Fatal(err)
				}
			}
			// Rank 2 fails midway through its peers.
			testHookMapPeer = func(rank, peer int) error {
				if rank == 2 && peer == 1 {
					return errors.New("injected")
				}
				return nil
			}
			defer func() { testHookMapPeer = nil }()
			if err := d.ranks[2].Import(d.table); err == nil {
				t.Fatal("the injected failure did not fail the import")
			}
		}},
		{"after commit", func(t *testing.T, d *globalDomain) {
			d.importAll(t)
			d.commitAll(t)
			views := d.views(t)
			b3, _ := views[0].Base(3)
			if err := views[0].Notify(3, b3, 8, 1, "set"); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, ph := range phases {
		t.Run(ph.name, func(t *testing.T) {
			clean(t)
			chips := openChips(t, 4)
			req := newGlobalReq(4, 4096)
			d := prepareDomain(t, req, chips, 2)
			ph.reach(t, d)
			// Every node aborts, in an order the transaction may pick:
			// rank 0 (the header's creator) first.
			for r, g := range d.ranks {
				if err := g.Abort(); err != nil {
					t.Errorf("abort rank %d: %v", r, err)
				}
				if left := liveOf(chips[r]); left != (live{}) {
					t.Errorf("chip %d after abort: %+v", r, left)
				}
			}
			wantGone(t, req, chips)
			for r, g := range d.ranks {
				if err := g.Release(); err != nil {
					t.Errorf("release after abort of rank %d: %v", r, err)
				}
				if err := g.Abort(); err != nil {
					t.Errorf("a second abort of rank %d: %v", r, err)
				}
			}
			wantGone(t, req, chips)
		})
	}
}

// Ranks released in any order: a peer that still maps rank 0's header
// and windows keeps working after rank 0 has released (and unlinked the
// header's name).
func TestGlobalReleaseOrder(t *testing.T) {
	clean(t)
	d := committedDomain(t, 2)
	req, chips := d.req, d.chips
	views := d.views(t)
	if err := d.ranks[0].Release(); err != nil {
		t.Fatal(err)
	}
	if left, _ := shm.Leftovers(globalHeaderOf(d.table[0].Handle)); len(left) != 0 {
		t.Errorf("the header is still named after its creator released: %v", left)
	}
	if err := d.ranks[0].Release(); err != nil {
		t.Errorf("a second release: %v", err)
	}
	v := views[1]
	own := d.ranks[1].WindowBase()
	if err := v.Notify(1, own, 8, 9, "set"); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Wait(own, 8, 9, "==", time.Second); got != 9 || err != nil {
		t.Errorf("rank 1 after rank 0 released: %d, %v", got, err)
	}
	b0, _ := v.Base(0)
	if err := chips[1].CopyIn(b0, []byte("still mapped")); err != nil {
		t.Error(err)
	}
	d.release(t)
	wantGone(t, req, chips)
}

// ---- prepare ----

// fabricOnly is a platform without the sim profile.
type fabricOnly struct{ hal.Platform }

func (fabricOnly) CommProfiles() []string { return []string{"a3-fabric-v1"} }
func (f fabricOnly) Serves(profile string) error {
	return fmt.Errorf("ValueError: comm_profile %q is not supported on %s", profile, f.Name())
}

type onPlatform struct {
	hal.Chip
	p hal.Platform
}

func (c onPlatform) Platform() hal.Platform { return c.p }

func TestPrepareGlobalChecks(t *testing.T) {
	clean(t)
	chips := openChips(t, 1)
	chip := chips[0]
	good := newGlobalReq(2, 4096)
	id := good.DomainID
	cases := []struct {
		name string
		mut  func(*GlobalRequest)
		rank int
		chip hal.Chip
		want string
	}{
		{"no chip", nil, 0, nil, "ValueError: comm: preparing global domain \"gtest\" (id %d, generation 1): no chip"},
		{"rank", nil, 2, chip, "IndexError: comm: preparing global domain \"gtest\" (id %d, generation 1): rank 2 out of range for 2 ranks"},
		{"negative rank", nil, -1, chip, "IndexError: comm: preparing global domain \"gtest\" (id %d, generation 1): rank -1 out of range for 2 ranks"},
		{"no ranks", func(q *GlobalRequest) { q.Ranks = 0 }, 0, chip, "ValueError: comm: preparing global domain \"gtest\" (id %d, generation 1): 0 ranks; want 1..4096"},
		{"window", func(q *GlobalRequest) { q.WindowSize = 0 }, 0, chip, "ValueError: comm: preparing global domain \"gtest\" (id %d, generation 1): window size must be in 1..1099511627776, got 0"},
		{"timeout", func(q *GlobalRequest) { q.Timeout = 0 }, 0, chip, "ValueError: comm: preparing global domain \"gtest\" (id %d, generation 1): timeout must be > 0, got 0s"},
		{"prefix", func(q *GlobalRequest) { q.Prefix = "other-" }, 0, chip, "ValueError: comm: preparing global domain \"gtest\" (id %d, generation 1): name prefix \"other-\" must start with \"simpler-\" and contain no \"/\""},
		{"long prefix", func(q *GlobalRequest) { q.Prefix = "simpler-" + strings.Repeat("p", 80) + "-" }, 1, chip,
			"ValueError: comm: preparing global domain \"gtest\" (id %d, generation 1): the window name \"simpler-ppp"},
		{"profile", nil, 0, onPlatform{chip, fabricOnly{chip.Platform()}},
			"ValueError: comm: preparing global domain \"gtest\" (id %d, generation 1): device 0 is on platform a2a3sim, which has no \"sim\" comm profile"},
	}
	for _, c := range cases {
		q := good
		if c.mut != nil {
			c.mut(&q)
		}
		g, desc, err := PrepareGlobal(q, c.rank, c.chip)
		wantErrPrefix(t, err, fmt.Sprintf(c.want, id))
		if g != nil || desc != (Descriptor{}) {
			t.Errorf("%s: a failed prepare returned %v, %v", c.name, g, desc)
		}
	}
	wantGone(t, good, chips)
}

// A rank is prepared once: preparing it twice fails and leaves the first
// untouched; other generations and other domains never collide.
func TestPrepareGlobalNames(t *testing.T) {
	clean(t)
	d := preparedDomain(t, 2)
	req, chips := d.req, d.chips
	for r := range 2 {
		before := liveOf(chips[r])
		_, _, err := PrepareGlobal(req, r, chips[r])
		if err == nil || !strings.Contains(err.Error(), "already prepared") {
			t.Errorf("rank %d prepared twice: %v", r, err)
		}
		if got := liveOf(chips[r]); got != before {
			t.Errorf("the failed prepare of rank %d changed the chip: %+v → %+v", r, before, got)
		}
	}
	// The next generation and another domain, concurrently alive.
	next := req
	next.Generation++
	other := newGlobalReq(2, 4096)
	other.Generation = req.Generation
	e := prepareDomain(t, next, chips, 1)
	f := prepareDomain(t, other, chips, 1)
	for _, x := range []*globalDomain{d, e, f} {
		x.importAll(t)
		x.commitAll(t)
	}
	// A signal in one is not seen in the others.
	vd, ve, vf := d.views(t), e.views(t), f.views(t)
	b1, _ := vd[0].Base(1)
	if err := vd[0].Notify(1, b1, 8, 42, "set"); err != nil {
		t.Fatal(err)
	}
	if got, _ := vd[1].Wait(d.ranks[1].WindowBase(), 8, 42, "==", time.Second); got != 42 {
		t.Errorf("domain d: %d", got)
	}
	for _, x := range []struct {
		v *View
		g *GlobalRank
	}{{ve[1], e.ranks[1]}, {vf[1], f.ranks[1]}} {
		if got := atomicLoad64(t, chips[1], x.g.WindowBase()); got != 0 {
			t.Errorf("domain %d generation %d sees %d", x.v.AllocationID(), x.g.req.Generation, got)
		}
	}
	for _, x := range []*globalDomain{d, e, f} {
		x.release(t)
		wantGone(t, x.req, nil)
	}
	wantGone(t, req, chips)
}
