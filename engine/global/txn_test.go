package global

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"simpler/engine"
	"simpler/hal/comm"
)

// runTxn steps a transaction batch by batch, answering each batch's
// steps in the order order gives (a permutation of the batch's indices,
// or nil for batch order), failing every step named in fail ("OP@node"),
// and returns the batches it was handed, each as "OP@node,OP@node".
func runTxn(t *txn, fail map[string]bool, order func(n int) []int) []string {
	var batches []string
	for batch, ok := t.Next(); ok; batch, ok = t.Next() {
		if len(batch) == 0 {
			panic("an empty batch while none is outstanding")
		}
		var names []string
		for _, s := range batch {
			names = append(names, fmt.Sprintf("%s@%d", s.Op, s.Node))
		}
		batches = append(batches, strings.Join(names, ","))
		idx := make([]int, len(batch))
		for i := range idx {
			idx[i] = i
		}
		if order != nil {
			idx = order(len(batch))
		}
		for k, i := range idx {
			s := batch[i]
			if k < len(idx)-1 { // the phase waits for every answer
				if more, ok := t.Next(); !ok || more != nil {
					panic("the transaction moved on with answers outstanding")
				}
			}
			var err error
			if fail[names[i]] {
				err = engine.Errorf(engine.RuntimeError, "injected at %s", names[i])
			}
			var descs []comm.Descriptor
			if s.Op == opPrepare && err == nil {
				for _, r := range t.ranks[s.Node] {
					descs = append(descs, comm.Descriptor{Rank: uint32(r), Ranks: uint32(t.size)})
				}
			}
			t.Done(s, descs, err)
		}
	}
	return batches
}

func twoNodes() *txn {
	return newTxn([]int{0, 1}, map[int][]int{0: {0, 1}, 1: {2, 3}}, 4)
}

func threeNodes() *txn {
	return newTxn([]int{2, 0, 1}, map[int][]int{2: {0}, 0: {1, 2}, 1: {3}}, 4)
}

func TestGtxnCommitsPhaseByPhase(t *testing.T) {
	x := twoNodes()
	got := runTxn(x, nil, nil)
	want := []string{"COMM_INIT@0,COMM_INIT@1", "PREPARE@0,PREPARE@1", "IMPORT@0,IMPORT@1", "COMMIT@0,COMMIT@1"}
	if !slices.Equal(got, want) || x.Err() != nil {
		t.Fatalf("batches %v err %v", got, x.Err())
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

// permutations is every order of 0..n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

// The rollback matrix, exhaustively over three nodes: for every phase,
// every non-empty set of nodes failing it and every order the phase's
// answers come in, the phases before it ran whole, every node that was
// sent PREPARE (all of them, from the PREPARE phase on; none before) is
// aborted in one batch, and the primary error is the failure first in node
// order.
func TestGtxnRollbackMatrix(t *testing.T) {
	nodes := []int{2, 0, 1}
	phases := []txnOp{opCommInit, opPrepare, opImport, opCommit}
	for pi, phase := range phases {
		for set := 1; set < 1<<len(nodes); set++ {
			fail := map[string]bool{}
			first := ""
			for i, n := range nodes {
				if set&(1<<i) != 0 {
					name := fmt.Sprintf("%s@%d", phase, n)
					fail[name] = true
					if first == "" {
						first = name
					}
				}
			}
			for _, perm := range permutations(len(nodes)) {
				x := threeNodes()
				got := runTxn(x, fail, func(int) []int { return perm })
				var want []string
				for _, p := range phases[:pi+1] {
					want = append(want, fmt.Sprintf("%s@2,%s@0,%s@1", p, p, p))
				}
				if phase != opCommInit {
					want = append(want, "ABORT@2,ABORT@0,ABORT@1")
				}
				if !slices.Equal(got, want) {
					t.Fatalf("failing %v answered in order %v: batches %v, want %v", fail, perm, got, want)
				}
				if x.Err() == nil || x.Err().Error() != "RuntimeError: injected at "+first || x.AbortErr() != nil {
					t.Fatalf("failing %v in order %v: err %v abort %v, want the error of %s", fail, perm, x.Err(), x.AbortErr(), first)
				}
			}
		}
	}
}

// An ABORT that fails still lets the other aborts go out, keeps the
// primary error, and reports itself (the first failed abort in node
// order, whatever order they were answered in) so the worker can refuse
// work.
func TestGtxnAbortFailure(t *testing.T) {
	for _, perm := range permutations(3) {
		x := threeNodes()
		got := runTxn(x, map[string]bool{"IMPORT@1": true, "ABORT@1": true, "ABORT@0": true}, func(int) []int { return perm })
		if got[len(got)-1] != "ABORT@2,ABORT@0,ABORT@1" {
			t.Fatalf("batches %v", got)
		}
		if x.Err() == nil || x.AbortErr() == nil || x.AbortErr().Error() != "RuntimeError: injected at ABORT@0" {
			t.Fatalf("order %v: err %v abort %v", perm, x.Err(), x.AbortErr())
		}
	}
}

func TestGtxnRefusesWrongDescriptors(t *testing.T) {
	x := twoNodes()
	for batch, ok := x.Next(); ok; batch, ok = x.Next() {
		for _, s := range batch {
			var descs []comm.Descriptor
			if s.Op == opPrepare {
				descs = []comm.Descriptor{{Rank: 3}, {Rank: 2}} // swapped ranks
			}
			x.Done(s, descs, nil)
		}
	}
	if x.Err() == nil || !strings.Contains(x.Err().Error(), "node 0 returned the descriptor of rank 3 for rank 0") {
		t.Fatalf("descriptors for the wrong ranks: err %v", x.Err())
	}
}

// A second answer to a step, or one to a step not in the batch, changes
// nothing: the phase still waits for the step it lacks.
func TestGtxnIgnoresStrayAnswers(t *testing.T) {
	x := twoNodes()
	batch, _ := x.Next()
	x.Done(batch[0], nil, nil)
	x.Done(batch[0], nil, engine.Errorf(engine.RuntimeError, "a repeat"))
	x.Done(txnStep{Op: opCommit, Node: 1}, nil, engine.Errorf(engine.RuntimeError, "not sent"))
	if more, ok := x.Next(); !ok || more != nil {
		t.Fatalf("moved on with COMM_INIT@1 unanswered: %v %v", more, ok)
	}
	x.Done(batch[1], nil, nil)
	if next, ok := x.Next(); !ok || len(next) != 2 || next[0].Op != opPrepare {
		t.Fatalf("after COMM_INIT: %v %v", next, ok)
	}
	if x.Err() != nil {
		t.Fatalf("a stray answer failed the transaction: %v", x.Err())
	}
}

func warmTwoNodes() *txn {
	return newWarmTxn([]int{0, 1}, map[int][]int{0: {0, 1}, 1: {2, 3}}, 4)
}

// A warm transaction that every node answers is one REATTACH phase, under
// the first generation.
func TestGtxnWarmIsOnePhase(t *testing.T) {
	x := warmTwoNodes()
	got := runTxn(x, nil, nil)
	if want := []string{"REATTACH@0,REATTACH@1"}; !slices.Equal(got, want) || x.Err() != nil || !x.Warm() || x.Gen() != 1 || x.WarmErr() != nil {
		t.Fatalf("batches %v err %v warm %v gen %d", got, x.Err(), x.Warm(), x.Gen())
	}
}

// The warm rollback matrix: a REATTACH that fails on any node (answered in
// any order) aborts every node, then the full transaction runs under the
// next generation; WarmErr is the failure first in node order. An ABORT
// that fails there ends it (Err the REATTACH failure, AbortErr the
// ABORT's); a full transaction that fails after the fallback aborts as any
// does.
func TestGtxnWarmRollbackMatrix(t *testing.T) {
	full := []string{"COMM_INIT@0,COMM_INIT@1", "PREPARE@0,PREPARE@1", "IMPORT@0,IMPORT@1", "COMMIT@0,COMMIT@1"}
	reversed := func(n int) []int {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = n - 1 - i
		}
		return idx
	}
	cases := []struct {
		name            string
		fail            []string
		want            []string
		warmErr, err    string
		abortErr        string
		gen             uint64
		committedByFull bool
	}{
		{"node 0", []string{"REATTACH@0"}, append([]string{"REATTACH@0,REATTACH@1", "ABORT@0,ABORT@1"}, full...), "REATTACH@0", "", "", 2, true},
		{"node 1", []string{"REATTACH@1"}, append([]string{"REATTACH@0,REATTACH@1", "ABORT@0,ABORT@1"}, full...), "REATTACH@1", "", "", 2, true},
		{"both", []string{"REATTACH@0", "REATTACH@1"}, append([]string{"REATTACH@0,REATTACH@1", "ABORT@0,ABORT@1"}, full...), "REATTACH@0", "", "", 2, true},
		{"abort fails", []string{"REATTACH@1", "ABORT@0"}, []string{"REATTACH@0,REATTACH@1", "ABORT@0,ABORT@1"}, "", "REATTACH@1", "ABORT@0", 1, false},
		{"fallback fails", []string{"REATTACH@0", "PREPARE@1"}, []string{"REATTACH@0,REATTACH@1", "ABORT@0,ABORT@1", full[0], full[1], "ABORT@0,ABORT@1"}, "REATTACH@0", "PREPARE@1", "", 2, false},
	}
	for _, c := range cases {
		for _, order := range []func(int) []int{nil, reversed} {
			fail := map[string]bool{}
			for _, f := range c.fail {
				fail[f] = true
			}
			x := warmTwoNodes()
			got := runTxn(x, fail, order)
			has := func(err error, want string) bool {
				if want == "" {
					return err == nil
				}
				return err != nil && strings.Contains(err.Error(), want)
			}
			if !slices.Equal(got, c.want) || !has(x.WarmErr(), c.warmErr) || !has(x.Err(), c.err) || !has(x.AbortErr(), c.abortErr) || x.Gen() != c.gen || x.Warm() {
				t.Errorf("%s: batches %v, warm err %v, err %v, abort err %v, gen %d, warm %v", c.name, got, x.WarmErr(), x.Err(), x.AbortErr(), x.Gen(), x.Warm())
			}
			if c.committedByFull && x.Table()[3].Rank != 3 {
				t.Errorf("%s: the fallback's table is not complete", c.name)
			}
		}
	}
}
