package engine

import (
	"bytes"
	"testing"

	"simpler/hal/comm"
)

// warmKernels register a kernel that fills its rank's window with 0xab
// and one that checks the window is zero and the CommContext names the
// domain's allocation id (the scalar after the context).
func warmKernels(t *testing.T, w *Worker) (dirty, check *Handle) {
	window := func(c *ChipCtx, a *TaskArgs) (*comm.View, []byte, error) {
		v, err := comm.Open(c.Chip, a.Scalars[0])
		if err != nil {
			return nil, nil, err
		}
		base, _ := v.Base(v.Rank())
		b, err := c.Chip.Bytes(base, v.WindowSize())
		return v, b, err
	}
	dirty = register(t, w, chipK("dirty", func(c *ChipCtx, a *TaskArgs) error {
		_, b, err := window(c, a)
		if err == nil {
			copy(b, bytes.Repeat([]byte{0xab}, len(b)))
		}
		return err
	}))
	check = register(t, w, chipK("check", func(c *ChipCtx, a *TaskArgs) error {
		v, b, err := window(c, a)
		if err != nil {
			return err
		}
		if v.AllocationID() != a.Scalars[1] {
			return Errorf(ValueError, "rank %d opens allocation %d, want %d", v.Rank(), v.AllocationID(), a.Scalars[1])
		}
		if !bytes.Equal(b, make([]byte, len(b))) {
			return Errorf(ValueError, "rank %d's window is not zero", v.Rank())
		}
		return nil
	}))
	return dirty, check
}

// collectiveCall is what a collective call does with a domain: allocate
// a task_only one, run a kernel on every rank, release it. It returns the
// domain and the window base of every rank.
func collectiveCall(t *testing.T, w *Worker, k *Handle, name string, workers ...int) (*Domain, []uint64) {
	var d *Domain
	var bases []uint64
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		d = must(o.AllocateDomain(DomainSpec{Name: name, Workers: workers, WindowSize: 8192, TaskOnly: true}))
		var args []*TaskArgs
		for _, id := range workers {
			v := must(d.Rank(id))
			bases = append(bases, v.WindowBase)
			args = append(args, &TaskArgs{Scalars: []uint64{v.DeviceCtx, d.AllocationID()}})
		}
		must(o.SubmitNextGroup(k, args, nil, workers))
		must(0, d.Release())
	}))
	if !d.Freed() {
		t.Fatalf("%s: not freed at the fence", name)
	}
	return d, bases
}

// TestWarmSlotTakesBackAFreedDomain: a task_only domain over the same
// members and window size as one freed before takes its ranks back (the
// same windows), with a fresh allocation id and a zero window; another
// shape gets a slot of its own; the Worker's close tears the parked ranks
// down before its chips close.
func TestWarmSlotTakesBackAFreedDomain(t *testing.T) {
	w := newWorker(t, Config{DeviceIDs: []int{0, 1, 2}})
	dirty, check := warmKernels(t, w)
	d1, bases1 := collectiveCall(t, w, dirty, "first", 0, 1)
	if got := w.domains.warm.idleCount(); got != 1 {
		t.Fatalf("%d idle slots after the first call, want 1", got)
	}
	d2, bases2 := collectiveCall(t, w, check, "second", 0, 1)
	if d2.AllocationID() <= d1.AllocationID() {
		t.Errorf("allocation id %d after %d", d2.AllocationID(), d1.AllocationID())
	}
	if bases2[0] != bases1[0] || bases2[1] != bases1[1] {
		t.Errorf("the second call did not take the slot back: windows %#x, were %#x", bases2, bases1)
	}
	collectiveCall(t, w, check, "other members", 1, 2)
	if got := w.domains.warm.idleCount(); got != 2 {
		t.Fatalf("%d idle slots, want 2 (one per shape)", got)
	}
	allocs, windows := 0, 0
	for _, s := range w.tree.chips {
		a, win := s.here().Live()
		allocs, windows = allocs+a, windows+win
	}
	if allocs == 0 || windows == 0 {
		t.Fatalf("parked ranks hold nothing in the chips (%d allocations, %d windows)", allocs, windows)
	}
	if err := w.domains.dropWarm(); err != nil {
		t.Fatal(err)
	}
	for i, s := range w.tree.chips {
		if a, win := s.here().Live(); a != 0 || win != 0 {
			t.Errorf("chip %d holds %d allocations and %d windows after dropWarm", i, a, win)
		}
	}
	// A slot whose parked ranks are gone allocates afresh, still zeroed.
	collectiveCall(t, w, dirty, "after the drop", 0, 1)
	if err := comm.DrainPool(); err != nil { // as a restarted chip process would have lost them
		t.Fatal(err)
	}
	collectiveCall(t, w, check, "after the drain", 0, 1)
}
