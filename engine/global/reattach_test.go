package global

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"simpler/engine"
	"simpler/hal/comm"
	"simpler/internal/enginetest"
	"simpler/internal/fault"
	"simpler/wire"
)

// stepLog records the transaction commands a broker sends (GlobalStep
// events, staging left out).
type stepLog struct {
	mu    sync.Mutex
	steps []string
}

func observeSteps(w *engine.Worker) *stepLog {
	l := &stepLog{}
	w.Events().Observe(func(e engine.Event) {
		if e.Kind == engine.GlobalStep && !strings.HasPrefix(e.Callable, "STAGE_") {
			l.mu.Lock()
			l.steps = append(l.steps, e.Callable)
			l.mu.Unlock()
		}
	})
	return l
}

// take returns the commands recorded since the last take, sorted.
func (l *stepLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.steps
	l.steps = nil
	slices.Sort(s)
	return s
}

// handles is every rank's window name of domain id on w's nodes, by rank.
func handles(t *testing.T, w *engine.Worker, id uint64) []string {
	t.Helper()
	var hs []string
	for _, c := range w.Children() {
		g := nodeOf(c).lookup(id)
		if g == nil {
			t.Fatalf("no domain %d on a node", id)
		}
		for _, d := range g.descs {
			hs = append(hs, d.Handle)
		}
	}
	return hs
}

// allocID is the allocation id in the CommContext of each rank of domain
// id on w's nodes.
func allocIDs(t *testing.T, w *engine.Worker, id uint64) []uint64 {
	t.Helper()
	var ids []uint64
	for _, c := range w.Children() {
		g := nodeOf(c).lookup(id)
		for i, p := range g.req.Places {
			v := enginetest.Must(comm.Open(enginetest.Must(c.Devices().Chip(p.Local)), g.ranks[i].DeviceCtx()))
			ids = append(ids, v.AllocationID())
		}
	}
	return ids
}

// A domain over the same members and window size as one released before
// comes up in one REATTACH phase and goes in one RELEASE_DOMAIN: the same
// pooled windows, zeroed, under a fresh domain id; a second live domain
// over the same members takes fresh windows the full way; and released,
// nothing of it is usable.
func TestGlobalDomainWarmReattach(t *testing.T) {
	w := l4Nodes(t)
	log := observeSteps(w)
	var first []string
	var d1 *Domain
	mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
		d1 = enginetest.Must(Allocate(o, fourRanks(false)))
		first = handles(t, w, d1.ID())
		enginetest.Must(0, d1.CopyToGlobal(3, []byte("dirty"), "out", 0))
	}))
	cold := log.take()
	if len(cold) != 10 || !slices.Contains(cold, "PREPARE") {
		t.Fatalf("the first domain sent %v, want the full transaction and its release", cold)
	}
	var d2 *Domain
	mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
		d2 = enginetest.Must(Allocate(o, fourRanks(false)))
		if got := log.take(); !slices.Equal(got, []string{"REATTACH", "REATTACH"}) {
			t.Errorf("the warm domain sent %v, want REATTACH to each node", got)
		}
		if got := handles(t, w, d2.ID()); !slices.Equal(got, first) {
			t.Errorf("windows %v, want the pooled %v", got, first)
		}
		for r, id := range allocIDs(t, w, d2.ID()) {
			if id != d2.ID() || id == d1.ID() {
				t.Errorf("rank %d's CommContext has allocation id %d, want the fresh %d", r, id, d2.ID())
			}
		}
		if got := enginetest.Must(d2.CopyFromGlobal(3, 5, "out", 0)); string(got) != "\x00\x00\x00\x00\x00" {
			t.Errorf("the reused window reads %q, want zeroes", got)
		}
		// The same members while d2 lives: its windows are not idle.
		d3 := enginetest.Must(Allocate(o, Spec{Name: "g3", Members: fourRanks(false).Members, WindowSize: 4096}))
		if hs := handles(t, w, d3.ID()); slices.ContainsFunc(hs, func(h string) bool { return slices.Contains(first, h) }) {
			t.Errorf("a second live domain shares windows with the first: %v and %v", hs, first)
		}
	}))
	if got := log.take(); slices.Contains(got, "REATTACH") && len(got) != 2+8+2*2 {
		t.Errorf("commands %v", got)
	}
	if !d2.Freed() || nodeGlobals(w) != 0 {
		t.Fatalf("freed %v, %d node domains left", d2.Freed(), nodeGlobals(w))
	}
	if _, err := d2.CopyFromGlobal(0, 1, "", 0); err == nil {
		t.Error("a released warm domain still stages")
	}
}

// A warm domain whose windows are gone (the nodes' pools drained) or whose
// REATTACH fails on a node falls back: ABORT to every node, then the full
// transaction under the next generation, and the domain works. An ABORT
// that fails there poisons the worker with the REATTACH failure primary.
func TestGlobalDomainWarmFallback(t *testing.T) {
	w := l4Nodes(t)
	log := observeSteps(w)
	alloc := func() (*Domain, error) {
		var d *Domain
		err := submitRun(t, w, func(o *engine.Orchestrator) (err error) {
			d, err = Allocate(o, fourRanks(false))
			if err == nil {
				err = d.CopyToGlobal(2, []byte("x"), "in", 0)
			}
			return err
		})
		return d, err
	}
	enginetest.Must(alloc())
	log.take()
	if err := comm.DrainPool(); err != nil {
		t.Fatal(err)
	}
	d := enginetest.Must(alloc())
	got := log.take()
	if d.Generation() != 2 || countOf(got, "REATTACH") != 2 || countOf(got, "ABORT") != 2 || countOf(got, "PREPARE") != 2 {
		t.Errorf("after draining the pools: generation %d, commands %v", d.Generation(), got)
	}
	t.Cleanup(func() { fault.Load("") })
	fault.Load("global.reattach@1")
	d = enginetest.Must(alloc())
	if got := log.take(); d.Generation() != 2 || countOf(got, "ABORT") != 2 || nodeGlobals(w) != 0 {
		t.Errorf("a failed REATTACH: generation %d, commands %v, %d node domains left", d.Generation(), got, nodeGlobals(w))
	}
	enginetest.Must(alloc()) // warm again: the fallback's windows are remembered
	if got := log.take(); countOf(got, "REATTACH") != 2 || countOf(got, "PREPARE") != 0 {
		t.Errorf("after a fallback: %v, want a warm domain", got)
	}
	fault.Load("global.reattach@1,global.abort@0")
	if _, err := alloc(); err == nil || !strings.Contains(err.Error(), "global.reattach@1") {
		t.Fatalf("primary error: %v", err)
	}
	if _, err := w.Submit(asBuild(func(o *engine.Orchestrator) error { return nil })); err == nil || !strings.Contains(err.Error(), "global.abort@0") {
		t.Fatalf("a poisoned worker accepted work: %v", err)
	}
	ReleaseHosted(w.Children()[0]) // what the failed abort left on node 0
}

func countOf(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

// A node refuses a REATTACH it cannot serve with a clear error and keeps
// nothing: a malformed table, a table of the wrong size, a window that is
// not idle in its pool (after taking another back: it is returned).
func TestReattachRefusals(t *testing.T) {
	w := l4Nodes(t)
	node := w.Children()[1]
	mustRun(t, w, func(o *engine.Orchestrator) error { _, err := Allocate(o, fourRanks(false)); return err })
	entry := brokerOf(w).warm.take(warmKey(fourRanks(false).Members, 4096))
	if entry == nil {
		t.Fatal("the broker remembered no windows")
	}
	d := &Domain{b: brokerOf(w), spec: fourRanks(false), id: 99, gen: 1, devRanks: []int{0, 1, 2, 3}, topology: "sha256:x", nodes: []int{0, 1}}
	places := []Place{{Rank: 2, Local: 0}, {Rank: 3, Local: 1}}
	good := engine.WireDescriptors(entry.table(99, 1, 4096))
	reattach := func(c *wire.Control) error {
		r := wire.ControlReply{Cmd: c.Cmd}
		return node.Command(*c, &r)
	}
	bad := d.command(txnStep{Op: opReattach, Node: 1, Gen: 1}, places, good)
	bad.Domain.Table = []byte("junk")
	if err := reattach(bad); engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("a malformed table: %v", err)
	}
	short := d.command(txnStep{Op: opReattach, Node: 1, Gen: 1}, places, wire.DescriptorTable{Descriptors: good.Descriptors[:3]})
	if err := reattach(short); engine.KindOf(err) != engine.ValueError {
		t.Errorf("a short table: %v", err)
	}
	// Rank 2's window is taken back, rank 3's is not there: rank 2's goes
	// back to the pool.
	stale := entry.table(99, 1, 4096)
	stale[3].Handle = stale[3].Handle[:len(stale[3].Handle)-32] + strings.Repeat("f", 32)
	if err := reattach(d.command(txnStep{Op: opReattach, Node: 1, Gen: 1}, places, engine.WireDescriptors(stale))); engine.KindOf(err) != engine.KeyError {
		t.Errorf("windows not in the pool: %v", err)
	}
	if Hosted(node) != 0 {
		t.Errorf("%d domains left on the node after refusals", Hosted(node))
	}
	// The real windows are still idle: the refusals took nothing.
	if err := reattach(d.command(txnStep{Op: opReattach, Node: 1, Gen: 1}, places, good)); err != nil {
		t.Fatalf("the remembered windows: %v", err)
	}
	if err := node.Command(wire.Control{Cmd: wire.CmdReleaseDomain, Domain: wire.Domain{ID: 99, Generation: 1}}, &wire.ControlReply{}); err != nil {
		t.Fatal(err)
	}
	brokerOf(w).warm.idle(entry)
}
