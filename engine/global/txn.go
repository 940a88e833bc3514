package global

import (
	"simpler/engine"
	"simpler/hal/comm"
)

// A global domain is brought up by a transaction the broker runs over
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
// A warm transaction (newWarmTxn: the broker remembers pooled windows
// of an earlier domain over the same members and window size, warm.go)
// first tries one phase instead:
//
//	REATTACH   every node takes its ranks' windows back from its pool
//	           (zeroed, under the fresh domain id), maps its peers' and
//	           commits: COMM_INIT … COMMIT in one command
//
// If every node succeeds the transaction has committed. If any fails, ABORT
// goes to every node (all were sent REATTACH), which leaves every node as
// a fresh transaction finds it: no domain of this id, the windows idle in
// their pools again. Then the full transaction runs from COMM_INIT under
// the next generation, and its outcome is the transaction's (Warm reports
// false, WarmErr says why REATTACH failed). An ABORT of the REATTACH that
// fails ends the transaction there: Err is the REATTACH failure first in
// node order, AbortErr the ABORT's.
//
// txn is that decision logic alone: a state machine with no I/O. Next
// says what to send to which nodes; Done records each answer. Tests step
// it directly; Domain.transact does the sending.

// txnOp is one node command of the transaction.
type txnOp uint8

const (
	opCommInit txnOp = iota + 1
	opPrepare
	opImport
	opCommit
	opAbort
	opReattach
)

func (o txnOp) String() string {
	return [...]string{"", "COMM_INIT", "PREPARE", "IMPORT", "COMMIT", "ABORT", "REATTACH"}[o]
}

// txnStep is one command for one node, of generation Gen of the domain.
type txnStep struct {
	Op   txnOp
	Node int
	Gen  uint64
}

// txn is the transaction's state.
type txn struct {
	nodes    []int         // in the order commands go out
	ranks    map[int][]int // node → the domain ranks it hosts
	size     int           // ranks in the domain
	phase    txnOp         // the phase being run, or opAbort
	batch    []txnStep     // the phase's steps, sent and not all answered
	answered []bool        // by index into batch
	errs     []error       // by index into batch: the phase's failures
	left     int           // steps of batch not answered yet
	prepared []int         // nodes sent PREPARE, in node order
	table    []comm.Descriptor
	err      error // the primary error
	abortErr error // an ABORT that failed
	done     bool

	gen      uint64 // the generation the steps carry
	warm     bool   // REATTACH is tried first
	aborting txnOp  // the phase whose failure the ABORT undoes
	warmErr  error  // the REATTACH failure first in node order
}

// newTxn starts a transaction over nodes, each hosting the given ranks,
// under generation 1.
func newTxn(nodes []int, ranks map[int][]int, size int) *txn {
	return &txn{nodes: nodes, ranks: ranks, size: size, table: make([]comm.Descriptor, size), gen: 1}
}

// newWarmTxn starts a transaction that tries REATTACH first.
func newWarmTxn(nodes []int, ranks map[int][]int, size int) *txn {
	t := newTxn(nodes, ranks, size)
	t.warm = true
	return t
}

// Next returns the next phase's steps, one per node, to send together;
// nil while steps of the current phase are unanswered (the driver has a
// bug if it asks then), and false once the transaction has ended (see Err
// and AbortErr).
func (t *txn) Next() ([]txnStep, bool) {
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
	if t.phase == opAbort {
		targets = t.prepared
	}
	t.batch = make([]txnStep, 0, len(targets))
	for _, n := range targets {
		t.batch = append(t.batch, txnStep{Op: t.phase, Node: n, Gen: t.gen})
	}
	t.answered, t.errs, t.left = make([]bool, len(t.batch)), make([]error, len(t.batch)), len(t.batch)
	if t.phase == opPrepare || t.phase == opReattach {
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
func (t *txn) endPhase() {
	switch {
	case t.phase == 0 && t.warm:
		t.phase = opReattach
		return
	case t.phase == 0:
		t.phase = opCommInit
		return
	case t.phase == opAbort:
		t.endAbort()
		return
	}
	for _, err := range t.errs {
		if err != nil {
			t.err, t.aborting = err, t.phase
			t.phase = opAbort
			return
		}
	}
	if t.phase == opCommit || t.phase == opReattach {
		t.done = true
		return
	}
	t.phase++
}

// endAbort ends the transaction once the ABORT is answered, unless it
// undid a REATTACH cleanly: then the full transaction starts over under
// the next generation, from nothing.
func (t *txn) endAbort() {
	for _, err := range t.errs {
		if err != nil && t.abortErr == nil {
			t.abortErr = err
		}
	}
	if t.aborting != opReattach || t.abortErr != nil {
		t.done = true
		return
	}
	t.warm, t.warmErr, t.err = false, t.err, nil
	t.gen++
	t.prepared = nil
	t.table = make([]comm.Descriptor, t.size)
	t.phase = opCommInit
}

// Done records the answer to step s of the current batch: for PREPARE,
// the node's descriptors (one per rank it hosts, in its ranks' order). An
// answer to a step not in the batch, or a second answer, is ignored.
func (t *txn) Done(s txnStep, descs []comm.Descriptor, err error) {
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
	if err == nil && s.Op == opPrepare {
		err = t.record(s.Node, descs)
	}
	t.errs[i] = err
}

// record places a node's descriptors in the table, checking they are its
// ranks'.
func (t *txn) record(node int, descs []comm.Descriptor) error {
	ranks := t.ranks[node]
	if len(descs) != len(ranks) {
		return engine.Errorf(engine.RuntimeError, "global domain: node %d returned %d descriptors for %d ranks", node, len(descs), len(ranks))
	}
	for i, r := range ranks {
		if int(descs[i].Rank) != r {
			return engine.Errorf(engine.RuntimeError, "global domain: node %d returned the descriptor of rank %d for rank %d", node, descs[i].Rank, r)
		}
	}
	for i, r := range ranks {
		t.table[r] = descs[i]
	}
	return nil
}

// Table is the complete rank-ordered descriptor table (valid once every
// PREPARE succeeded).
func (t *txn) Table() []comm.Descriptor { return t.table }

// Err is the transaction's primary error, nil if it committed.
func (t *txn) Err() error { return t.err }

// AbortErr is the first ABORT failure in node order: the worker must be
// poisoned.
func (t *txn) AbortErr() error { return t.abortErr }

// Warm reports whether the transaction committed by REATTACH (or, before
// the end, still tries it without a failure).
func (t *txn) Warm() bool { return t.warm && t.err == nil }

// WarmErr is why REATTACH failed (the failure first in node order), nil
// if it was not tried or succeeded.
func (t *txn) WarmErr() error { return t.warmErr }

// Gen is the generation of the transaction's steps: 1, or 2 after a
// REATTACH fell back to the full transaction.
func (t *txn) Gen() uint64 { return t.gen }
