package comm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"simpler/hal"
	"simpler/hal/shm"
)

// ---- descriptor ----

// newGlobalReq is a fresh domain; its id has several hex digits, so that
// names are checked with the id in hex.
func newGlobalReq(n, size int) GlobalRequest {
	return GlobalRequest{DomainID: 0xd00d0000 + globalSeq.Add(1), Generation: 1, Name: "gtest",
		Ranks: n, WindowSize: size, Timeout: 20 * time.Second}
}

// globalDomain is a domain whose ranks run in this process, rank r on
// chips[r], grouped into nodes of perNode ranks.
type globalDomain struct {
	req     GlobalRequest
	chips   []hal.Chip
	perNode int
	ranks   []*GlobalRank
	table   []Descriptor
}

// eachNode runs f for every node concurrently, each node handling its
// ranks in order, as a node of the broker's transaction does.
func (d *globalDomain) eachNode(f func(rank int) error) error {
	errs := make([]error, len(d.chips))
	var wg sync.WaitGroup
	for first := 0; first < len(d.chips); first += d.perNode {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := first; r < min(first+d.perNode, len(d.chips)); r++ {
				errs[r] = f(r)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// prepareDomain prepares every rank and gathers the table through the
// wire encoding; the ranks are released at cleanup.
func prepareDomain(t *testing.T, req GlobalRequest, chips []hal.Chip, perNode int) *globalDomain {
	t.Helper()
	d := &globalDomain{req: req, chips: chips, perNode: perNode,
		ranks: make([]*GlobalRank, req.Ranks), table: make([]Descriptor, req.Ranks)}
	t.Cleanup(func() { d.release(t) })
	wire := make([][]byte, req.Ranks)
	err := d.eachNode(func(r int) error {
		g, desc, err := PrepareGlobal(req, r, chips[r])
		d.ranks[r] = g
		if err == nil {
			wire[r] = EncodeDescriptor(desc)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, b := range wire {
		if d.table[r], err = DecodeDescriptor(b); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func (d *globalDomain) importAll(t *testing.T) {
	t.Helper()
	if err := d.eachNode(func(r int) error { return d.ranks[r].Import(d.table) }); err != nil {
		t.Fatal(err)
	}
}

func (d *globalDomain) commitAll(t *testing.T) {
	t.Helper()
	if err := d.eachNode(func(r int) error { return d.ranks[r].Commit() }); err != nil {
		t.Fatal(err)
	}
}

// preparedDomain is a fresh domain of n ranks of 4 KiB windows, one rank
// a node, prepared.
func preparedDomain(t *testing.T, n int) *globalDomain {
	t.Helper()
	return prepareDomain(t, newGlobalReq(n, 4096), openChips(t, n), 1)
}

// committedDomain is preparedDomain, imported and committed.
func committedDomain(t *testing.T, n int) *globalDomain {
	t.Helper()
	d := preparedDomain(t, n)
	d.importAll(t)
	d.commitAll(t)
	return d
}

func (d *globalDomain) views(t *testing.T) []*View {
	t.Helper()
	views := make([]*View, len(d.ranks))
	for r, g := range d.ranks {
		v, err := Open(d.chips[r], g.DeviceCtx())
		if err != nil {
			t.Fatal(err)
		}
		views[r] = v
	}
	return views
}

func (d *globalDomain) release(t *testing.T) {
	t.Helper()
	for _, g := range d.ranks {
		if g != nil {
			if err := g.Release(); err != nil {
				t.Error(err)
			}
		}
	}
}

// globalObjects lists what of one generation of a domain exists: names in
// /dev/shm (under this process's prefix) and mappings in the cache.
func globalObjects(req GlobalRequest) []string {
	stem := globalStem(req.DomainID, req.Generation)
	left, _ := shm.Leftovers(shm.Prefix() + stem)
	cacheMu.Lock()
	defer cacheMu.Unlock()
	for k := range cache {
		if strings.Contains(k, stem) {
			left = append(left, "cached "+k)
		}
	}
	return left
}

// wantGone checks that nothing of the domain is left: no name, no cached
// mapping, no region on any chip.
func wantGone(t *testing.T, req GlobalRequest, chips []hal.Chip) {
	t.Helper()
	if left := globalObjects(req); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	wantBare(t, chips)
}

type live struct{ allocs, windows int }

func liveOf(c hal.Chip) live {
	a, w := c.Live()
	return live{a, w}
}

// refs is the number of holders of a cached object (0 if not cached).
func refs(name string) int {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if o := cache[name]; o != nil {
		return o.refs
	}
	return 0
}

// atomicLoad64 reads a window word as a kernel would.
func atomicLoad64(t *testing.T, chip hal.Chip, addr uint64) int64 {
	t.Helper()
	b := mustBytes(t, chip, addr, 8)
	return atomic.LoadInt64((*int64)(unsafe.Pointer(&b[0])))
}

// barrierRounds runs rounds of the domain barrier on every view
// concurrently. Before each round a rank publishes the round in its own
// window (word 64); after it, it must see every rank's word at least
// there: the barrier orders the stores, across nodes and processes.
func barrierRounds(t *testing.T, views []*View, chips []hal.Chip, rounds int) {
	t.Helper()
	var wg sync.WaitGroup
	for i, v := range views {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own, _ := v.Base(v.Rank())
			for k := 1; k <= rounds; k++ {
				if err := v.Notify(v.Rank(), own+64, 8, int64(k), "set"); err != nil {
					t.Error(err)
					return
				}
				if err := v.Barrier(20 * time.Second); err != nil {
					t.Error(err)
					return
				}
				for p := range v.Size() {
					base, _ := v.Base(p)
					if got := atomicLoad64(t, chips[i], base+64); got < int64(k) {
						t.Errorf("rank %d after barrier round %d sees rank %d at round %d", v.Rank(), k, p, got)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// ---- the domain across nodes in one process ----

func TestGlobalFourRanksTwoNodes(t *testing.T) {
	clean(t)
	const size = 8192
	chips := openChips(t, 4)
	req := newGlobalReq(4, size)
	req.Name = "g4"
	d := prepareDomain(t, req, chips, 2)
	wantPrepared(t, d)
	if got := globalObjects(req); len(got) != 5*2 { // 4 windows and the header, named and cached
		t.Errorf("objects after prepare: %v", got)
	}

	d.importAll(t)
	for r, g := range d.ranks {
		if !g.Imported() || g.DeviceCtx() == 0 || g.Committed() {
			t.Errorf("rank %d after import: imported %v, ctx %#x, committed %v", r, g.Imported(), g.DeviceCtx(), g.Committed())
		}
		if _, err := Open(chips[r], g.DeviceCtx()); err == nil {
			t.Errorf("rank %d: a kernel opened the domain before commit", r)
		}
		if got := liveOf(chips[r]); got != (live{1, 5}) {
			t.Errorf("chip %d after import: %+v, want the context and 4 windows and the header", r, got)
		}
	}
	d.commitAll(t)
	views := d.views(t)
	for r, v := range views {
		if v.Rank() != r || v.Size() != 4 || v.WindowSize() != size || v.AllocationID() != req.DomainID || v.Name() != "g4" {
			t.Errorf("view %d: rank %d size %d window %d id %d name %q", r, v.Rank(), v.Size(), v.WindowSize(), v.AllocationID(), v.Name())
		}
		if !d.ranks[r].Committed() {
			t.Errorf("rank %d not committed", r)
		}
	}

	signalAcrossNodes(t, d, views)

	// Plain data stored by rank 3 (node B) into rank 0's window (node A),
	// ordered by the barrier of all four.
	if err := chips[3].CopyIn(d.ranks[3].Bases()[0]+4096, []byte("from rank 3")); err != nil {
		t.Fatal(err)
	}
	barrierRounds(t, views, chips, 20)
	if got := string(mustBytes(t, chips[0], d.ranks[0].WindowBase()+4096, 11)); got != "from rank 3" {
		t.Errorf("rank 0's window holds %q", got)
	}

	ctxs := make([]uint64, 4)
	for r, g := range d.ranks {
		ctxs[r] = g.DeviceCtx()
	}
	d.release(t)
	wantGone(t, req, chips)
	for r, g := range d.ranks {
		if _, err := Open(chips[r], ctxs[r]); err == nil {
			t.Errorf("rank %d: the released context still opens", r)
		}
		if err := views[r].Barrier(time.Second); err == nil {
			t.Errorf("rank %d: a view of the released domain still works", r)
		}
		if g.DeviceCtx() != 0 || g.WindowBase() != 0 || g.Imported() || g.Committed() {
			t.Errorf("rank %d after release: ctx %#x base %#x", r, g.DeviceCtx(), g.WindowBase())
		}
	}
}

// wantPrepared checks every rank of d as Prepare left it: its descriptor,
// its window's name (a capability of its own) and contents, and that it
// is neither imported nor committed.
func wantPrepared(t *testing.T, d *globalDomain) {
	t.Helper()
	req, chips, size := d.req, d.chips, d.req.WindowSize
	for r, g := range d.ranks {
		want := Descriptor{Profile: ProfileSim, DomainID: req.DomainID, Generation: 1, Rank: uint32(r), Ranks: uint32(req.Ranks),
			MappingSize: uint64(size), Handle: d.table[r].Handle, Secret: d.table[r].Secret}
		if d.table[r] != want || g.Descriptor() != want {
			t.Errorf("rank %d exported %v, want %v", r, d.table[r], want)
		}
		// A secret of its own, and the window's seal holds it.
		if s, ok := readSeal(ownSeal(g.core.own)); want.Secret.IsZero() || !ok || s.secret != want.Secret {
			t.Errorf("rank %d: its window's seal does not hold the descriptor's secret", r)
		}
		for j := range r {
			if d.table[j].Secret == want.Secret {
				t.Errorf("ranks %d and %d share a secret", j, r)
			}
		}
		// The name is this process's, of this domain and rank, with a key
		// of 128 random bits that no other rank shares.
		key, ok := req.windowKey(d.table[r].Handle, r)
		if !ok || !strings.HasPrefix(d.table[r].Handle, fmt.Sprintf("%sgdom-%x-1-", shm.Prefix(), req.DomainID)) {
			t.Errorf("rank %d's window is named %q", r, d.table[r].Handle)
		}
		for j := range r {
			if k, _ := req.windowKey(d.table[j].Handle, j); k == key {
				t.Errorf("ranks %d and %d share the key %s", j, r, key)
			}
		}
		if b := mustBytes(t, chips[r], g.WindowBase(), size); slices.ContainsFunc(b, func(x byte) bool { return x != 0 }) {
			t.Errorf("rank %d's window is not zero", r)
		}
		if g.DeviceCtx() != 0 || g.Imported() || g.Committed() {
			t.Errorf("rank %d after prepare: ctx %#x, imported %v, committed %v", r, g.DeviceCtx(), g.Imported(), g.Committed())
		}
		if err := g.Commit(); err == nil || !strings.Contains(err.Error(), "commit before import") {
			t.Errorf("commit before import: %v", err)
		}
		if bases := g.Bases(); slices.IndexFunc(bases, func(b uint64) bool { return b != 0 }) != r {
			t.Errorf("rank %d after prepare maps %#x", r, bases)
		}
	}
}

// signalAcrossNodes has every rank of a four-rank domain on two nodes
// signal the rank at the same place on the other node, who answers back,
// and add into rank 1's counter.
func signalAcrossNodes(t *testing.T, d *globalDomain, views []*View) {
	t.Helper()
	var wg sync.WaitGroup
	for r, v := range views {
		wg.Add(1)
		go func() {
			defer wg.Done()
			peer := (r + 2) % 4
			pb, _ := v.Base(peer)
			own, _ := v.Base(r)
			if err := v.Notify(peer, pb+8*uint64(r), 8, int64(100+r), "set"); err != nil {
				t.Error(err)
				return
			}
			if got, err := v.Wait(own+8*uint64(peer), 8, int64(100+peer), "==", 20*time.Second); err != nil || got != int64(100+peer) {
				t.Errorf("rank %d waiting for rank %d: %d, %v", r, peer, got, err)
			}
			// And every rank adds into rank 1's counter.
			b1, _ := v.Base(1)
			if err := v.Notify(1, b1+256, 4, 1, "add"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got, err := views[1].Wait(d.ranks[1].WindowBase()+256, 4, 4, "==", 20*time.Second); err != nil {
		t.Errorf("rank 1's counter: %d, %v", got, err)
	}
}

// A domain of one rank needs nothing but itself.
func TestGlobalSingleRank(t *testing.T) {
	clean(t)
	d := committedDomain(t, 1)
	req, chips := d.req, d.chips
	v := d.views(t)[0]
	if err := v.Barrier(time.Second); err != nil {
		t.Error(err)
	}
	if err := v.Notify(0, d.ranks[0].WindowBase(), 8, 5, "set"); err != nil {
		t.Error(err)
	}
	if got, err := v.Wait(d.ranks[0].WindowBase(), 8, 5, "==", time.Second); got != 5 || err != nil {
		t.Errorf("wait: %d, %v", got, err)
	}
	d.release(t)
	wantGone(t, req, chips)
}

// ---- two real processes ----

// globalChildEnv carries the GlobalRequest to the child of
// TestGlobalTwoProcesses; descriptors travel through pipes (fd 3 to the
// parent, fd 4 from it).
const globalChildEnv = "SIMPLER_COMM_GLOBAL_CHILD"

// Two nodes in two processes, each with its own name prefix: the parent
// hosts ranks 0 and 1, the child ranks 2 and 3. They share nothing but the
// request and the descriptor tables they exchange; signals, data and the
// barrier cross the boundary, and once both have released nothing of
// either is left in /dev/shm.
func TestGlobalTwoProcesses(t *testing.T) {
	if spec := os.Getenv(globalChildEnv); spec != "" {
		globalChild(t, spec)
		return
	}
	clean(t)
	const size = 8192
	chips := openChips(t, 2)
	req := newGlobalReq(4, size)
	req.Generation = 7
	fromChild, childOut, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	childIn, toChild, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	child := startChild(t, "TestGlobalTwoProcesses", globalChildEnv, req, childOut, childIn)
	// Registered later, so run first: a failing parent lets the child see
	// EOF instead of blocking.
	t.Cleanup(func() { fromChild.Close(); toChild.Close() })
	fail := func(format string, args ...any) {
		t.Helper()
		fromChild.Close()
		toChild.Close()
		child.reap()
		t.Fatalf("%s\nchild output:\n%s", fmt.Sprintf(format, args...), child.out.String())
	}

	// This node: ranks 0 and 1. The table's other half comes from the
	// child.
	d := &globalDomain{req: req, chips: chips, perNode: 2, ranks: make([]*GlobalRank, 2), table: make([]Descriptor, 4)}
	t.Cleanup(func() { d.release(t) })
	if err := prepareWithChild(d, fromChild, toChild); err != nil {
		fail("%v", err)
	}
	childPrefix := child.prefix
	if !strings.HasPrefix(d.table[2].Handle, childPrefix) {
		fail("rank 2's window %q is not under the child's prefix %s", d.table[2].Handle, childPrefix)
	}
	for r := range 2 {
		if err := d.ranks[r].Import(d.table); err != nil {
			fail("import: %v", err)
		}
		if err := d.ranks[r].Commit(); err != nil {
			fail("commit: %v", err)
		}
	}
	views := []*View{openGlobalView(t, chips[0], d.ranks[0]), openGlobalView(t, chips[1], d.ranks[1])}
	b2, _ := views[0].Base(2)
	if err := views[0].Notify(2, b2, 8, 7, "set"); err != nil {
		t.Fatal(err)
	}
	if got, err := views[1].Wait(d.ranks[1].WindowBase(), 8, 8, "==", 20*time.Second); err != nil || got != 8 {
		fail("reply from rank 3: %d, %v", got, err)
	}
	b3, _ := views[1].Base(3)
	if err := chips[1].CopyIn(b3+4096, []byte("from node A")); err != nil {
		t.Fatal(err)
	}
	barrierRounds(t, views, chips, 50)
	if got := string(mustBytes(t, chips[0], d.ranks[0].WindowBase()+4096, 11)); got != "from node B" {
		t.Errorf("rank 0's window holds %q", got)
	}
	// Release while the child may still run: it keeps what it mapped.
	d.release(t)
	if err := child.reap(); err != nil {
		t.Fatalf("child: %v\n%s", err, child.out.String())
	}
	if left, _ := shm.Leftovers(childPrefix); len(left) > 0 {
		t.Errorf("the child left %v", left)
	}
	wantGone(t, req, chips)
}

// prepareWithChild prepares d's ranks 0 and 1 here and trades
// descriptors with the child, which hosts ranks 2 and 3: it reads the
// child's two, sends the whole table back, and decodes it into d.table.
func prepareWithChild(d *globalDomain, fromChild io.Reader, toChild io.Writer) error {
	table := make([]byte, 4*DescriptorSize)
	for r := range 2 {
		g, desc, err := PrepareGlobal(d.req, r, d.chips[r])
		if err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		d.ranks[r] = g
		copy(table[r*DescriptorSize:], EncodeDescriptor(desc))
	}
	if _, err := io.ReadFull(fromChild, table[2*DescriptorSize:]); err != nil {
		return fmt.Errorf("reading the child's descriptors: %w", err)
	}
	if _, err := toChild.Write(table); err != nil {
		return fmt.Errorf("sending the table: %w", err)
	}
	for r := range 4 {
		var err error
		if d.table[r], err = DecodeDescriptor(table[r*DescriptorSize : (r+1)*DescriptorSize]); err != nil {
			return fmt.Errorf("descriptor %d: %w", r, err)
		}
	}
	return nil
}

func openGlobalView(t *testing.T, chip hal.Chip, g *GlobalRank) *View {
	t.Helper()
	v, err := Open(chip, g.DeviceCtx())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// globalChild is the second node of TestGlobalTwoProcesses: ranks 2 and 3.
func globalChild(t *testing.T, spec string) {
	clean(t)
	var req GlobalRequest
	if err := json.Unmarshal([]byte(spec), &req); err != nil {
		t.Fatal(err)
	}
	toParent, fromParent := os.NewFile(3, "to-parent"), os.NewFile(4, "from-parent")
	defer toParent.Close()
	defer fromParent.Close()
	chips := openChips(t, 2)
	ranks := make([]*GlobalRank, 2)
	t.Cleanup(func() {
		for _, g := range ranks {
			if g != nil {
				if err := g.Release(); err != nil {
					t.Error(err)
				}
			}
		}
	})
	var mine []byte
	for i := range 2 {
		g, desc, err := PrepareGlobal(req, 2+i, chips[i])
		if err != nil {
			t.Fatal(err)
		}
		ranks[i] = g
		mine = append(mine, EncodeDescriptor(desc)...)
	}
	if _, err := toParent.Write(mine); err != nil {
		t.Fatal(err)
	}
	wire := make([]byte, 4*DescriptorSize)
	if _, err := io.ReadFull(fromParent, wire); err != nil {
		t.Fatal(err)
	}
	table := make([]Descriptor, 4)
	for r := range table {
		var err error
		if table[r], err = DecodeDescriptor(wire[r*DescriptorSize : (r+1)*DescriptorSize]); err != nil {
			t.Fatal(err)
		}
	}
	views := make([]*View, 2)
	for i, g := range ranks {
		if err := g.Import(table); err != nil {
			t.Fatal(err)
		}
		if err := g.Commit(); err != nil {
			t.Fatal(err)
		}
		views[i] = openGlobalView(t, chips[i], g)
	}
	if _, err := views[0].Wait(ranks[0].WindowBase(), 8, 7, "==", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	b1, _ := views[1].Base(1)
	if err := views[1].Notify(1, b1, 8, 8, "set"); err != nil {
		t.Fatal(err)
	}
	b0, _ := views[0].Base(0)
	if err := chips[0].CopyIn(b0+4096, []byte("from node B")); err != nil {
		t.Fatal(err)
	}
	barrierRounds(t, views, chips, 50)
	if got := string(mustBytes(t, chips[1], ranks[1].WindowBase()+4096, 11)); got != "from node A" {
		t.Errorf("rank 3's window holds %q", got)
	}
}

// ---- import: checks, atomicity, idempotence ----
