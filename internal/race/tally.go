package race

import "sync"

// NodeCount is what the detector of a node checked in another process (a
// remote node, a level-3 node process) found, as the node last said.
type NodeCount struct {
	Node    string // as its output is tagged: "node 0", "node process 1"
	Checked bool   // it runs a detector at all
	Races   int    // the distinct races (and uninitialised reads) it reported
}

// Tally keeps the latest count of every node, in the order each first
// reported. A process keeps one per kind of node, for the whole run: the
// CLI reads it after the script closed its Workers. Counts only grow: a
// smaller one (a node process started again) does not take back what an
// earlier incarnation found.
type Tally struct {
	mu    sync.Mutex
	nodes []*NodeCount
	of    map[any]*NodeCount
}

// Note records node's latest count; node is its identity, name what the
// count is shown as.
func (t *Tally) Note(node any, name string, checked bool, races int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.of[node]
	if c == nil {
		if t.of == nil {
			t.of = map[any]*NodeCount{}
		}
		c = &NodeCount{Node: name}
		t.of[node], t.nodes = c, append(t.nodes, c)
	}
	c.Checked = c.Checked || checked
	c.Races = max(c.Races, races)
}

// Of is node's count, false before its first.
func (t *Tally) Of(node any) (NodeCount, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.of[node]; c != nil {
		return *c, true
	}
	return NodeCount{}, false
}

// Counts is every node's count, in the order they first reported.
func (t *Tally) Counts() []NodeCount {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]NodeCount, len(t.nodes))
	for i, c := range t.nodes {
		out[i] = *c
	}
	return out
}
