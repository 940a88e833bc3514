package engine

import "simpler/hal/comm"

// A global domain is brought up by a transaction the L4 worker runs over
// the nodes that host its ranks, phase by phase:
//
//	COMM_INIT  every node re-checks capability and topology
//	PREPARE    every node makes windows for its ranks, returns descriptors
//	IMPORT     every node gets the complete rank-ordered table
//	COMMIT     every node makes its view visible
//
// A phase goes to every node at once: Next hands out the whole phase as
// one batch of steps, which the driver sends concurrently, and the
// transaction moves on only once every step of the batch has been
// answered (Done, in any order). So a phase never overlaps the next, and
// a node is never sent ABORT while one of its commands is in flight.
//
// On any failure, ABORT goes to every node that was sent PREPARE
// (committed ones included), again as one batch, and the primary error is
// that of the failed step first in node order (deterministic, whatever
// order the answers came in). An ABORT that fails leaves device state
// nothing can reach: AbortErr is set and the worker must refuse all
// further work.
//
// gtxn is that decision logic alone: a state machine with no I/O. Next
// says what to send to which nodes; Done records each answer. Tests step
// it directly; the worker's driver does the sending.

// gtxnOp is one node command of the transaction.
type gtxnOp uint8

const (
	opGlobalCommInit gtxnOp = iota + 1
	opGlobalPrepare
	opGlobalImport
	opGlobalCommit
	opGlobalAbort
)

func (o gtxnOp) String() string {
	return [...]string{"", "COMM_INIT", "PREPARE", "IMPORT", "COMMIT", "ABORT"}[o]
}

// gtxnStep is one command for one node.
type gtxnStep struct {
	Op   gtxnOp
	Node int
}

// gtxn is the transaction's state.
type gtxn struct {
	nodes    []int         // in the order commands go out
	ranks    map[int][]int // node → the domain ranks it hosts
	size     int           // ranks in the domain
	phase    gtxnOp        // the phase being run, or opGlobalAbort
	batch    []gtxnStep    // the phase's steps, sent and not all answered
	answered []bool        // by index into batch
	errs     []error       // by index into batch: the phase's failures
	left     int           // steps of batch not answered yet
	prepared []int         // nodes sent PREPARE, in node order
	table    []comm.Descriptor
	err      error // the primary error
	abortErr error // an ABORT that failed
	done     bool
}

// newGtxn starts a transaction over nodes, each hosting the given ranks.
func newGtxn(nodes []int, ranks map[int][]int, size int) *gtxn {
	return &gtxn{nodes: nodes, ranks: ranks, size: size, table: make([]comm.Descriptor, size)}
}

// Next returns the next phase's steps, one per node, to send together;
// nil while steps of the current phase are unanswered (the driver has a
// bug if it asks then), and false once the transaction has ended (see Err
// and AbortErr).
func (t *gtxn) Next() ([]gtxnStep, bool) {
	switch {
	case t.done:
		return nil, false
	case t.left > 0:
		return nil, true
	}
	t.endPhase()
	if t.done {
		return nil, false
	}
	targets := t.nodes
	if t.phase == opGlobalAbort {
		targets = t.prepared
	}
	t.batch = make([]gtxnStep, 0, len(targets))
	for _, n := range targets {
		t.batch = append(t.batch, gtxnStep{Op: t.phase, Node: n})
	}
	t.answered, t.errs, t.left = make([]bool, len(t.batch)), make([]error, len(t.batch)), len(t.batch)
	if t.phase == opGlobalPrepare {
		t.prepared = append(t.prepared[:0], t.nodes...) // sent, so each may hold windows
	}
	if t.left == 0 { // an abort with nothing prepared
		t.done = true
		return nil, false
	}
	return t.batch, true
}

// endPhase decides, once the batch is all answered, what comes next: the
// next phase, the abort (keeping the first failure in node order as the
// primary error), or the end.
func (t *gtxn) endPhase() {
	if t.phase == 0 {
		t.phase = opGlobalCommInit
		return
	}
	if t.phase == opGlobalAbort {
		for _, err := range t.errs {
			if err != nil && t.abortErr == nil {
				t.abortErr = err
			}
		}
		t.done = true
		return
	}
	for _, err := range t.errs {
		if err != nil {
			t.err = err
			t.phase = opGlobalAbort
			return
		}
	}
	if t.phase == opGlobalCommit {
		t.done = true
		return
	}
	t.phase++
}

// Done records the answer to step s of the current batch: for PREPARE,
// the node's descriptors (one per rank it hosts, in its ranks' order). An
// answer to a step not in the batch, or a second answer, is ignored.
func (t *gtxn) Done(s gtxnStep, descs []comm.Descriptor, err error) {
	i := -1
	for j, b := range t.batch {
		if b == s && !t.answered[j] {
			i = j
			break
		}
	}
	if i < 0 {
		return
	}
	t.answered[i] = true
	t.left--
	if err == nil && s.Op == opGlobalPrepare {
		err = t.record(s.Node, descs)
	}
	t.errs[i] = err
}

// record places a node's descriptors in the table, checking they are its
// ranks'.
func (t *gtxn) record(node int, descs []comm.Descriptor) error {
	ranks := t.ranks[node]
	if len(descs) != len(ranks) {
		return Errorf(RuntimeError, "global domain: node %d returned %d descriptors for %d ranks", node, len(descs), len(ranks))
	}
	for i, r := range ranks {
		if int(descs[i].Rank) != r {
			return Errorf(RuntimeError, "global domain: node %d returned the descriptor of rank %d for rank %d", node, descs[i].Rank, r)
		}
	}
	for i, r := range ranks {
		t.table[r] = descs[i]
	}
	return nil
}

// Table is the complete rank-ordered descriptor table (valid once every
// PREPARE succeeded).
func (t *gtxn) Table() []comm.Descriptor { return t.table }

// Err is the transaction's primary error, nil if it committed.
func (t *gtxn) Err() error { return t.err }

// AbortErr is the first ABORT failure in node order: the worker must be
// poisoned.
func (t *gtxn) AbortErr() error { return t.abortErr }
