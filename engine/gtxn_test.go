package engine

import (
	"fmt"
	"slices"
	"testing"

	"simpler/hal/comm"
)

// runGtxn steps a transaction, failing step `fail` (an "OP@node" string)
// and the abort `failAbort`, and returns the steps it took.
func runGtxn(t *gtxn, fail, failAbort string) []string {
	var steps []string
	for s, ok := t.Next(); ok; s, ok = t.Next() {
		name := fmt.Sprintf("%s@%d", s.Op, s.Node)
		steps = append(steps, name)
		var err error
		if name == fail || name == failAbort {
			err = Errorf(RuntimeError, "injected at %s", name)
		}
		var descs []comm.Descriptor
		if s.Op == opGlobalPrepare && err == nil {
			for _, r := range t.ranks[s.Node] {
				descs = append(descs, comm.Descriptor{Rank: uint32(r), Ranks: uint32(t.size)})
			}
		}
		t.Done(s, descs, err)
	}
	return steps
}

func twoNodes() *gtxn {
	return newGtxn([]int{0, 1}, map[int][]int{0: {0, 1}, 1: {2, 3}}, 4)
}

func TestGtxnCommitsPhaseByPhase(t *testing.T) {
	x := twoNodes()
	got := runGtxn(x, "", "")
	want := []string{"COMM_INIT@0", "COMM_INIT@1", "PREPARE@0", "PREPARE@1", "IMPORT@0", "IMPORT@1", "COMMIT@0", "COMMIT@1"}
	if !slices.Equal(got, want) || x.Err() != nil {
		t.Fatalf("steps %v err %v", got, x.Err())
	}
	for r, d := range x.Table() {
		if int(d.Rank) != r {
			t.Errorf("table[%d] holds rank %d", r, d.Rank)
		}
	}
	if _, ok := x.Next(); ok {
		t.Error("a finished transaction went on")
	}
}

// The rollback matrix: a failure at each phase on each node aborts every
// node that was sent PREPARE, committed ones included, and keeps the
// primary error.
func TestGtxnRollbackMatrix(t *testing.T) {
	cases := map[string][]string{
		"COMM_INIT@0": nil,
		"COMM_INIT@1": nil,
		"PREPARE@0":   {"ABORT@0"},
		"PREPARE@1":   {"ABORT@0", "ABORT@1"},
		"IMPORT@0":    {"ABORT@0", "ABORT@1"},
		"IMPORT@1":    {"ABORT@0", "ABORT@1"},
		"COMMIT@0":    {"ABORT@0", "ABORT@1"},
		"COMMIT@1":    {"ABORT@0", "ABORT@1"},
	}
	for fail, aborts := range cases {
		x := twoNodes()
		steps := runGtxn(x, fail, "")
		i := slices.Index(steps, fail)
		if i < 0 || !slices.Equal(steps[i+1:], aborts) {
			t.Errorf("failing %s: steps %v, want aborts %v after it", fail, steps, aborts)
		}
		if x.Err() == nil || x.Err().Error() != "RuntimeError: injected at "+fail || x.AbortErr() != nil {
			t.Errorf("failing %s: err %v abort %v", fail, x.Err(), x.AbortErr())
		}
	}
}

// An ABORT that fails still lets the other aborts go out, keeps the
// primary error, and reports itself so the worker can refuse work.
func TestGtxnAbortFailure(t *testing.T) {
	x := twoNodes()
	steps := runGtxn(x, "IMPORT@1", "ABORT@0")
	if !slices.Equal(steps[len(steps)-2:], []string{"ABORT@0", "ABORT@1"}) {
		t.Fatalf("steps %v", steps)
	}
	if x.Err() == nil || x.AbortErr() == nil || x.AbortErr().Error() != "RuntimeError: injected at ABORT@0" {
		t.Fatalf("err %v abort %v", x.Err(), x.AbortErr())
	}
}

func TestGtxnRefusesWrongDescriptors(t *testing.T) {
	x := twoNodes()
	for s, ok := x.Next(); ok; s, ok = x.Next() {
		var descs []comm.Descriptor
		if s.Op == opGlobalPrepare {
			descs = []comm.Descriptor{{Rank: 3}, {Rank: 2}} // swapped ranks
		}
		x.Done(s, descs, nil)
	}
	if x.Err() == nil {
		t.Fatal("descriptors for the wrong ranks were accepted")
	}
}
