package engine

import "simpler/hal/comm"

// A global domain is brought up by a transaction the L4 worker runs over
// the nodes that host its ranks, node by node and phase by phase:
//
//	COMM_INIT  every node re-checks capability and topology
//	PREPARE    every node makes windows for its ranks, returns descriptors
//	IMPORT     every node gets the complete rank-ordered table
//	COMMIT     every node makes its view visible
//
// On any failure, ABORT goes to every node that was sent PREPARE
// (committed ones included) and the first error is the transaction's. An
// ABORT that fails leaves device state nothing can reach: AbortErr is set
// and the worker must refuse all further work.
//
// gtxn is that decision logic alone: a state machine with no I/O. Next
// says what to send to which node; Done records the answer. Tests step it
// directly; the worker's driver does the sending.

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
	next     int           // index into nodes within the phase
	prepared []int         // nodes sent PREPARE, in order
	table    []comm.Descriptor
	err      error // the primary error
	abortErr error // an ABORT that failed
	done     bool
}

// newGtxn starts a transaction over nodes, each hosting the given ranks.
func newGtxn(nodes []int, ranks map[int][]int, size int) *gtxn {
	return &gtxn{nodes: nodes, ranks: ranks, size: size, phase: opGlobalCommInit, table: make([]comm.Descriptor, size)}
}

// Next returns the next command to send, or false when the transaction
// has ended (see Err and AbortErr).
func (t *gtxn) Next() (gtxnStep, bool) {
	if t.done {
		return gtxnStep{}, false
	}
	if t.phase == opGlobalAbort {
		if t.next >= len(t.prepared) {
			t.done = true
			return gtxnStep{}, false
		}
		return gtxnStep{Op: opGlobalAbort, Node: t.prepared[t.next]}, true
	}
	if t.next >= len(t.nodes) { // the phase is complete on every node
		if t.phase == opGlobalCommit {
			t.done = true
			return gtxnStep{}, false
		}
		t.phase++
		t.next = 0
	}
	return gtxnStep{Op: t.phase, Node: t.nodes[t.next]}, true
}

// Done records the answer to step s: for PREPARE, the node's descriptors
// (one per rank it hosts, in its ranks' order).
func (t *gtxn) Done(s gtxnStep, descs []comm.Descriptor, err error) {
	if s.Op == opGlobalAbort {
		if err != nil && t.abortErr == nil {
			t.abortErr = err
		}
		t.next++
		return
	}
	if s.Op == opGlobalPrepare {
		t.prepared = append(t.prepared, s.Node) // sent, so it may hold windows
	}
	if err == nil && s.Op == opGlobalPrepare {
		err = t.record(s.Node, descs)
	}
	if err != nil {
		t.err = err
		t.phase, t.next = opGlobalAbort, 0
		return
	}
	t.next++
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
		t.table[r] = descs[i]
	}
	return nil
}

// Table is the complete rank-ordered descriptor table (valid once every
// PREPARE succeeded).
func (t *gtxn) Table() []comm.Descriptor { return t.table }

// Err is the transaction's primary error, nil if it committed.
func (t *gtxn) Err() error { return t.err }

// AbortErr is the first ABORT failure: the worker must be poisoned.
func (t *gtxn) AbortErr() error { return t.abortErr }
