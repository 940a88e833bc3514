package global

import (
	"fmt"

	"simpler/engine"
	"simpler/hal/comm"
	"simpler/wire"
)

// REATTACH, the node side of a warm global domain: one command that does
// what COMM_INIT, PREPARE, IMPORT_TABLE and COMMIT do, for a domain whose
// windows are the pooled ones of an earlier domain over the same members
// (hal/comm: GlobalRequest.Reuse). Its table names every rank's window
// with a fresh secret the broker drew for it; this node takes its own
// ranks' back from its pool (zeroed, under the domain's fresh id, sealed
// with the table's secret), checks and maps its peers' (an importer's kept
// mappings make that cheap; it waits for a peer's owner to reseal only a
// window it verified itself before), and commits. Only windows of this
// node's own pool take a secret from the table, and a peer's window is
// mapped only if its seal holds the table's secret, so a table that names
// another parent's windows maps nothing. Anything missing or stale (a
// window taken by another domain or dropped, a header gone, a chip that is
// a process of its own and pools nothing) fails the command and leaves the
// node as it was; the broker then aborts and runs the full transaction.

// nodeReqOf is the node's request of a PREPARE or REATTACH body.
func nodeReqOf(dm wire.Domain, extra wire.PrepareExtra) nodeReq {
	req := nodeReq{ID: dm.ID, Gen: dm.Generation, Name: extra.Name, Size: dm.Size, WindowSize: int(dm.WindowSize)}
	for _, b := range extra.Buffers {
		req.Buffers = append(req.Buffers, engine.BufferSpec(b))
	}
	for _, rk := range dm.Ranks {
		req.Places = append(req.Places, Place{Rank: int(rk.Rank), Local: int(rk.Worker)})
	}
	return req
}

// reattachCmd decodes REATTACH's table, checks the topology as COMM_INIT
// does and reattaches.
func (n *node) reattachCmd(dm wire.Domain) error {
	t, err := wire.DecodeReattach(dm.Table)
	if err != nil {
		return engine.Errorf(engine.ValueError, "REATTACH: a malformed table: %v", err)
	}
	if err := checkNodeTopology(n.w, topologyOf(&t.Topology), dm.Ranks); err != nil {
		return err
	}
	if err := n.w.LocalDomains().InitComm(); err != nil {
		return err
	}
	table, err := engine.CommDescriptors(t.Descriptors)
	if err != nil {
		return engine.Wrap(err, "REATTACH")
	}
	return n.reattach(nodeReqOf(dm, t.Extra), table)
}

// reattach brings up a committed domain over the pooled windows table
// names. A repeat of a reattached domain does nothing; any failure
// releases what this command made (the windows go back to the pool).
func (n *node) reattach(req nodeReq, table []comm.Descriptor) error {
	if err := n.w.Ready("REATTACH"); err != nil {
		return err
	}
	if g := n.lookup(req.ID); g != nil {
		n.mu.Lock()
		committed := g.committed
		n.mu.Unlock()
		if !g.req.same(req) || !committed {
			return engine.Errorf(engine.ValueError, "REATTACH: global domain %d is already here with other parameters or in another phase", req.ID)
		}
		return nil
	}
	if len(table) != req.Size {
		return engine.Errorf(engine.ValueError, "REATTACH: a table of %d descriptors for %d ranks", len(table), req.Size)
	}
	offsets, err := engine.BufferOffsets("REATTACH", req.Buffers, req.WindowSize)
	if err != nil {
		return err
	}
	g := &nodeDomain{req: req, offsets: offsets}
	if err := g.reattach(n, table); err != nil {
		g.release()
		return err
	}
	n.mu.Lock()
	g.committed = true
	n.domains[req.ID] = g
	n.mu.Unlock()
	return nil
}

// reattach takes back each local rank's window, then imports the table
// and commits on each.
func (g *nodeDomain) reattach(n *node, table []comm.Descriptor) error {
	g.ranks = make([]engine.NodeRank, 0, len(g.req.Places))
	g.descs = make([]comm.Descriptor, 0, len(g.req.Places))
	for _, p := range g.req.Places {
		if p.Rank < 0 || p.Rank >= len(table) {
			return engine.Errorf(engine.ValueError, "REATTACH: rank %d outside the table", p.Rank)
		}
		r, d, err := n.prepareRank(g.req, p, &table[p.Rank])
		if err != nil {
			return err
		}
		g.ranks, g.descs = append(g.ranks, r), append(g.descs, d)
		if d != table[p.Rank] {
			return engine.Errorf(engine.ValueError, "REATTACH: rank %d's descriptor is %v, the table has %v", p.Rank, d, table[p.Rank])
		}
	}
	for i, r := range g.ranks {
		if err := r.Import(table); err != nil {
			return engine.Wrap(err, fmt.Sprintf("REATTACH: rank %d", g.req.Places[i].Rank))
		}
	}
	for _, r := range g.ranks {
		if err := r.Commit(); err != nil {
			return err
		}
	}
	return nil
}
