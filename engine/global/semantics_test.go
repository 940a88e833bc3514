package global

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"simpler/engine"
	"simpler/internal/enginetest"
)

// l4Counted is l4Nodes with a count of the global-domain commands the
// broker sends to its nodes (GlobalStep events).
func l4Counted(t *testing.T, nodes ...engine.Config) (*engine.Worker, *atomic.Int64) {
	t.Helper()
	w := l4Nodes(t, nodes...)
	var steps atomic.Int64
	w.Events().Observe(func(e engine.Event) {
		if e.Kind == engine.GlobalStep {
			steps.Add(1)
		}
	})
	return w, &steps
}

// Point 4: global device ranks not given explicitly are assigned in node
// order, skipping every explicit one; the example of the issue.
func TestGlobalDeviceRanksSkipExplicit(t *testing.T) {
	w, err := engine.NewWorker(engine.Config{Level: 4, Platform: sim(t)})
	if err != nil {
		t.Fatal(err)
	}
	n0, _ := engine.NewWorker(engine.Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0}, GlobalDeviceRanks: []int{1}})
	n1, _ := engine.NewWorker(engine.Config{Level: 3, Platform: sim(t), DeviceIDs: []int{1, 2}})
	w.AddWorker(n0)
	w.AddWorker(n1)
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
		d := enginetest.Must(Allocate(o, Spec{Name: "g", Members: [][2]int{{1, 1}, {0, 0}, {1, 0}}, WindowSize: 64}))
		if !slices.Equal(d.DeviceRanks(), []int{2, 1, 0}) {
			t.Errorf("device ranks %v, want [2 1 0] (node 1 gets [0, 2] beside node 0's explicit [1])", d.DeviceRanks())
		}
	}))
	if byNode := deviceRanks(w); !slices.Equal(byNode[0], []int{1}) || !slices.Equal(byNode[1], []int{0, 2}) {
		t.Errorf("per node %v", byNode)
	}
}

// Point 4: two members with one explicit rank are refused before any
// node is sent anything, naming both; a domain that spans only one of
// them works.
func TestGlobalDeviceRanksExplicitDuplicate(t *testing.T) {
	w, steps := l4Counted(t, engine.Config{GlobalDeviceRanks: []int{3, 4}}, engine.Config{GlobalDeviceRanks: []int{9, 3}})
	err := submitRun(t, w, func(o *engine.Orchestrator) error {
		_, err := Allocate(o, fourRanks(false))
		return err
	})
	want := "members (0, 0) and (1, 1) both have global device rank 3"
	if engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want a engine.ValueError with %q", err, want)
	}
	if steps.Load() != 0 {
		t.Errorf("%d node commands sent for a refused placement", steps.Load())
	}
	mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
		d := enginetest.Must(Allocate(o, Spec{Name: "one", Members: [][2]int{{0, 0}, {1, 0}}, WindowSize: 64}))
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
	var d *Domain
	mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
		d = enginetest.Must(Allocate(o, fourRanks(false)))
		if m, err := d.Member(2); err != nil || m != [2]int{1, 0} {
			t.Errorf("member(2) while live: %v %v", m, err)
		}
		if _, err := d.Member(4); engine.KindOf(err) != engine.IndexError {
			t.Errorf("member(4): %v", err)
		}
		if off, n, err := d.BufferRange("out"); err != nil || off != 1024 || n != 1024 {
			t.Errorf("buffer_range while live: %d %d %v", off, n, err)
		}
		enginetest.Must(0, d.CopyToGlobal(1, []byte{7}, "in", 0))
		enginetest.Must(0, d.Release())
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

func checkReleasedRefuses(t *testing.T, d *Domain, when string) {
	t.Helper()
	released := func(what string, err error) {
		t.Helper()
		if engine.KindOf(err) != engine.RuntimeError || !strings.Contains(err.Error(), `global domain "g" was released`) {
			t.Errorf("%s %s: got %v, want a engine.RuntimeError", what, when, err)
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
	var first, retained *Domain
	mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
		first = enginetest.Must(Allocate(o, fourRanks(false)))
		before := steps.Load()
		_, err := Allocate(o, Spec{Name: "g", Members: [][2]int{{1, 1}}, WindowSize: 64})
		if engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), `a global domain named "g" is already live`) {
			t.Errorf("a second live %q: %v", "g", err)
		}
		if steps.Load() != before {
			t.Errorf("the refused allocation sent %d node commands", steps.Load()-before)
		}
		enginetest.Must(0, first.Release())
		again := enginetest.Must(Allocate(o, fourRanks(false))) // released: the name is free
		if again.ID() != first.ID()+1 {
			t.Errorf("ids %d then %d: the refusal took an id", first.ID(), again.ID())
		}
		spec := fourRanks(true)
		spec.Name = "kept"
		retained = enginetest.Must(Allocate(o, spec))
	}))
	err := submitRun(t, w, func(o *engine.Orchestrator) error {
		_, err := Allocate(o, Spec{Name: "kept", Members: [][2]int{{0, 0}}, WindowSize: 64})
		return err
	})
	if engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), `"kept" is already live`) {
		t.Errorf("a retained domain's name in a later run: %v", err)
	}
	if err := retained.Release(); err != nil || !retained.Freed() {
		t.Fatalf("release of the retained domain: %v", err)
	}
	mustRun(t, w, func(o *engine.Orchestrator) error {
		_, err := Allocate(o, Spec{Name: "kept", Members: [][2]int{{0, 0}}, WindowSize: 64})
		return err
	})
	if n := nodeGlobals(w); n != 0 {
		t.Errorf("%d node domains left", n)
	}
}

// A retained domain released from inside a later run is not freed under
// that run's DAG, which may use it: the later run's fence frees it (its
// own run's fence has passed), and a retained domain released before its
// own run's fence is freed by that fence.
func TestGlobalRetainedReleasedInLaterRun(t *testing.T) {
	w, _ := l4Counted(t)
	var kept, early *Domain
	mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
		kept = enginetest.Must(Allocate(o, fourRanks(true)))
		spec := fourRanks(true)
		spec.Name = "early"
		early = enginetest.Must(Allocate(o, spec))
		enginetest.Must(0, early.Release())
	}))
	if kept.Released() || kept.Freed() || !early.Freed() {
		t.Fatalf("after the first fence: kept released %v freed %v, early freed %v", kept.Released(), kept.Freed(), early.Freed())
	}
	mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
		enginetest.Must(0, kept.Release())
		if !kept.Released() || kept.Freed() {
			t.Errorf("released in a run being built: released %v freed %v, want released and not freed", kept.Released(), kept.Freed())
		}
		if n := nodeGlobals(w); n != 2 {
			t.Errorf("%d node domains while the later run is built, want the kept domain's 2", n)
		}
	}))
	if !kept.Freed() || nodeGlobals(w) != 0 {
		t.Fatalf("after the later run's fence: freed %v, %d node domains left", kept.Freed(), nodeGlobals(w))
	}
}
