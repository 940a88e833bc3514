package engine

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// l4Counted is l4Nodes with a count of the global-domain commands the
// broker sends to its nodes.
func l4Counted(t *testing.T) (*Worker, *atomic.Int64) {
	t.Helper()
	w, err := NewWorker(Config{Level: 4, Platform: sim(t)})
	if err != nil {
		t.Fatal(err)
	}
	var steps atomic.Int64
	w.Events().Observe(func(e Event) {
		if e.Kind == GlobalStep {
			steps.Add(1)
		}
	})
	for n := 0; n < 2; n++ {
		c, _ := NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{2 * n, 2*n + 1}})
		if _, err := w.AddWorker(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return w, &steps
}

// Point 4: global device ranks not given explicitly are assigned in node
// order, skipping every explicit one; the example of the issue.
func TestGlobalDeviceRanksSkipExplicit(t *testing.T) {
	w, err := NewWorker(Config{Level: 4, Platform: sim(t)})
	if err != nil {
		t.Fatal(err)
	}
	n0, _ := NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0}, GlobalDeviceRanks: []int{1}})
	n1, _ := NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{1, 2}})
	w.AddWorker(n0)
	w.AddWorker(n1)
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		d := must(o.AllocateGlobalDomain(GlobalSpec{Name: "g", Members: [][2]int{{1, 1}, {0, 0}, {1, 0}}, WindowSize: 64}))
		if !slices.Equal(d.DeviceRanks(), []int{2, 1, 0}) {
			t.Errorf("device ranks %v, want [2 1 0] (node 1 gets [0, 2] beside node 0's explicit [1])", d.DeviceRanks())
		}
	}))
	if byNode := w.globalDeviceRanks(); !slices.Equal(byNode[0], []int{1}) || !slices.Equal(byNode[1], []int{0, 2}) {
		t.Errorf("per node %v", byNode)
	}
}

// Point 4: two members with one explicit rank are refused before any
// node is sent anything, naming both; a domain that spans only one of
// them works.
func TestGlobalDeviceRanksExplicitDuplicate(t *testing.T) {
	w, steps := l4Counted(t)
	w.children[0].cfg.GlobalDeviceRanks = []int{3, 4}
	w.children[1].cfg.GlobalDeviceRanks = []int{9, 3}
	defer func() { w.children[0].cfg.GlobalDeviceRanks, w.children[1].cfg.GlobalDeviceRanks = nil, nil }()
	err := submitRun(t, w, func(o *Orchestrator) error {
		_, err := o.AllocateGlobalDomain(fourRanks(false))
		return err
	})
	want := "members (0, 0) and (1, 1) both have global device rank 3"
	if KindOf(err) != ValueError || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want a ValueError with %q", err, want)
	}
	if steps.Load() != 0 {
		t.Errorf("%d node commands sent for a refused placement", steps.Load())
	}
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		d := must(o.AllocateGlobalDomain(GlobalSpec{Name: "one", Members: [][2]int{{0, 0}, {1, 0}}, WindowSize: 64}))
		if !slices.Equal(d.DeviceRanks(), []int{3, 9}) {
			t.Errorf("device ranks %v", d.DeviceRanks())
		}
	}))
}

// Point 6: a released handle refuses member(), buffer_range() and
// staging with a RuntimeError, at once (before the fence frees it) and
// after; its plain attributes stay readable.
func TestGlobalReleasedHandleRefuses(t *testing.T) {
	w, _ := l4Counted(t)
	var d *GlobalDomain
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		d = must(o.AllocateGlobalDomain(fourRanks(false)))
		if m, err := d.Member(2); err != nil || m != [2]int{1, 0} {
			t.Errorf("member(2) while live: %v %v", m, err)
		}
		if _, err := d.Member(4); KindOf(err) != IndexError {
			t.Errorf("member(4): %v", err)
		}
		if off, n, err := d.BufferRange("out"); err != nil || off != 1024 || n != 1024 {
			t.Errorf("buffer_range while live: %d %d %v", off, n, err)
		}
		must(0, d.CopyToGlobal(1, []byte{7}, "in", 0))
		must(0, d.Release())
		checkReleasedRefuses(t, d, "in the run")
		if d.Freed() {
			t.Error("freed before its run's fence")
		}
	}))
	if !d.Freed() {
		t.Fatal("not freed at the fence")
	}
	checkReleasedRefuses(t, d, "after the fence")
	if len(d.Spec().Members) != 4 || d.ID() == 0 {
		t.Errorf("attributes of a released handle: %+v", d.Spec())
	}
}

func checkReleasedRefuses(t *testing.T, d *GlobalDomain, when string) {
	t.Helper()
	released := func(what string, err error) {
		t.Helper()
		if KindOf(err) != RuntimeError || !strings.Contains(err.Error(), `global domain "g" was released`) {
			t.Errorf("%s %s: got %v, want a RuntimeError", what, when, err)
		}
	}
	_, err := d.Member(0)
	released("member(0)", err)
	_, _, err = d.BufferRange("in")
	released("buffer_range", err)
	released("copy_to_global_domain", d.CopyToGlobal(0, []byte{1}, "", 0))
	_, err = d.CopyFromGlobal(0, 1, "in", 0)
	released("copy_from_global_domain", err)
}

// Point 7: a name is unique among the worker's live global domains. A
// second allocation under a live name is a ValueError naming it, sent to
// no node and taking no domain id; a released one's name may be reused,
// in the same run or after a retained domain is released.
func TestGlobalDomainNamesUnique(t *testing.T) {
	w, steps := l4Counted(t)
	var first, retained *GlobalDomain
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		first = must(o.AllocateGlobalDomain(fourRanks(false)))
		before := steps.Load()
		_, err := o.AllocateGlobalDomain(GlobalSpec{Name: "g", Members: [][2]int{{1, 1}}, WindowSize: 64})
		if KindOf(err) != ValueError || !strings.Contains(err.Error(), `a global domain named "g" is already live`) {
			t.Errorf("a second live %q: %v", "g", err)
		}
		if steps.Load() != before {
			t.Errorf("the refused allocation sent %d node commands", steps.Load()-before)
		}
		must(0, first.Release())
		again := must(o.AllocateGlobalDomain(fourRanks(false))) // released: the name is free
		if again.ID() != first.ID()+1 {
			t.Errorf("ids %d then %d: the refusal took an id", first.ID(), again.ID())
		}
		spec := fourRanks(true)
		spec.Name = "kept"
		retained = must(o.AllocateGlobalDomain(spec))
	}))
	err := submitRun(t, w, func(o *Orchestrator) error {
		_, err := o.AllocateGlobalDomain(GlobalSpec{Name: "kept", Members: [][2]int{{0, 0}}, WindowSize: 64})
		return err
	})
	if KindOf(err) != ValueError || !strings.Contains(err.Error(), `"kept" is already live`) {
		t.Errorf("a retained domain's name in a later run: %v", err)
	}
	if err := retained.Release(); err != nil || !retained.Freed() {
		t.Fatalf("release of the retained domain: %v", err)
	}
	mustRun(t, w, func(o *Orchestrator) error {
		_, err := o.AllocateGlobalDomain(GlobalSpec{Name: "kept", Members: [][2]int{{0, 0}}, WindowSize: 64})
		return err
	})
	if n := nodeGlobals(w); n != 0 {
		t.Errorf("%d node domains left", n)
	}
}
