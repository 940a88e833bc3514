package global

import (
	"slices"
	"sync"

	"simpler/engine"
	"simpler/hal"
	"simpler/hal/comm"
	"simpler/internal/bounds"
	"simpler/internal/fault"
	"simpler/wire"
)

// The node side of a global domain: what a level-3 worker does, for the
// ranks it hosts, when the broker's transaction reaches it. Every command
// is idempotent for an identical repeat and refuses a conflicting one, so
// a broker may resend after an uncertain answer.

// Place puts one rank of a global domain on a local chip.
type Place struct {
	Rank  int // in the whole domain
	Local int // this node's NEXT_LEVEL (chip) id
}

// nodeReq is what PREPARE tells a node.
type nodeReq struct {
	ID, Gen    uint64
	Name       string
	Size       int // ranks in the whole domain
	WindowSize int
	Places     []Place
	Buffers    []engine.BufferSpec
}

func (a nodeReq) same(b nodeReq) bool {
	return a.ID == b.ID && a.Gen == b.Gen && a.Name == b.Name && a.Size == b.Size &&
		a.WindowSize == b.WindowSize && slices.Equal(a.Places, b.Places) && slices.Equal(a.Buffers, b.Buffers)
}

// nodeDomain is one global domain on this node.
type nodeDomain struct {
	req       nodeReq
	offsets   []int
	ranks     []engine.NodeRank // per place
	descs     []comm.Descriptor
	committed bool // under the node's mu
}

// node is a level-3 worker's hosted global domains: its Role.
type node struct {
	w       *engine.Worker
	mu      sync.Mutex // guards domains and each one's committed; a leaf
	domains map[uint64]*nodeDomain
	once    sync.Once // registers close
}

// nodeOf is w's node side, made the first time w is sent a global
// command (or asked about its domains).
func nodeOf(w *engine.Worker) *node {
	n := w.Role(nodeRole, func() any { return &node{w: w, domains: map[uint64]*nodeDomain{}} }).(*node)
	n.once.Do(func() { w.OnClose(engine.CloseAfterDrain, nodeRole, func() error { n.releaseAll(); return nil }) })
	return n
}

// lookup is domain id on this node, or nil.
func (n *node) lookup(id uint64) *nodeDomain {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.domains[id]
}

// prepare makes a window for each of this node's ranks and returns their
// descriptors, in place order.
func (n *node) prepare(req nodeReq) ([]comm.Descriptor, error) {
	if err := n.w.Ready("PREPARE"); err != nil {
		return nil, err
	}
	if g := n.lookup(req.ID); g != nil {
		if !g.req.same(req) {
			return nil, engine.Errorf(engine.ValueError, "PREPARE: global domain %d is already prepared here with other parameters", req.ID)
		}
		return g.descs, nil
	}
	offsets, err := engine.BufferOffsets("PREPARE", req.Buffers, req.WindowSize)
	if err != nil {
		return nil, err
	}
	g := &nodeDomain{req: req, offsets: offsets}
	for _, p := range req.Places {
		r, d, err := n.prepareRank(req, p, nil)
		if err != nil {
			g.release()
			return nil, err
		}
		g.ranks, g.descs = append(g.ranks, r), append(g.descs, d)
	}
	n.mu.Lock()
	n.domains[req.ID] = g
	n.mu.Unlock()
	return g.descs, nil
}

// prepareRank makes one rank's window and maps it into its chip, where
// the chip's memory is: here, or in the chip's own process. A non-nil
// reuse, the rank's descriptor in a REATTACH table, takes back the pooled
// window it names instead, sealed with its secret (hal/comm:
// GlobalRequest.Reuse), which only a chip in this process can.
//
// Every window's name starts with the worker's shared-memory prefix: this
// process's, so its leak check sees them, and this worker's namespace, so
// no other worker of the process, with domain ids of its own broker, makes
// names of the same shape (comm.RemoveGlobalRank relies on that).
func (n *node) prepareRank(req nodeReq, p Place, reuse *comm.Descriptor) (engine.NodeRank, comm.Descriptor, error) {
	chips := n.w.Devices().LocalChips()
	if p.Local < 0 || p.Local >= len(chips) {
		return nil, comm.Descriptor{}, engine.Errorf(engine.ValueError, "PREPARE: local worker %d is not a chip of this node (0..%d)", p.Local, len(chips)-1)
	}
	gr := comm.GlobalRequest{Prefix: n.w.ShmPrefix(), DomainID: req.ID, Generation: req.Gen, Name: req.Name,
		Ranks: req.Size, WindowSize: req.WindowSize, Timeout: engine.CommTimeout}
	if reuse != nil {
		gr.Reuse, gr.ReuseSecret = reuse.Handle, reuse.Secret
	}
	return chips[p.Local].PrepareGlobalRank(gr, p.Rank)
}

// domain is domain id on this node, or op's KeyError.
func (n *node) domain(op string, id uint64) (*nodeDomain, error) {
	g := n.lookup(id)
	if g == nil {
		return nil, engine.Errorf(engine.KeyError, "%s: no global domain %d on this node", op, id)
	}
	return g, nil
}

// importTable gives every local rank the complete table. Each rank's
// import is atomic and idempotent (hal/comm), so a repeat is harmless.
func (n *node) importTable(id uint64, table []comm.Descriptor) error {
	g, err := n.domain("IMPORT", id)
	if err != nil {
		return err
	}
	for _, r := range g.ranks {
		if err := r.Import(table); err != nil {
			return err
		}
	}
	return nil
}

// commit makes the node's view visible to get_global_domain.
func (n *node) commit(id uint64) error {
	g, err := n.domain("COMMIT", id)
	if err != nil {
		return err
	}
	for _, r := range g.ranks {
		if err := r.Commit(); err != nil {
			return err
		}
	}
	n.mu.Lock()
	g.committed = true
	n.mu.Unlock()
	return nil
}

// release invalidates the view first, then frees the windows; ABORT is
// the same at any phase. Releasing an unknown domain is a no-op.
func (n *node) release(id uint64) error {
	n.mu.Lock()
	g := n.domains[id]
	if g == nil {
		n.mu.Unlock()
		return nil
	}
	g.committed = false
	delete(n.domains, id)
	n.mu.Unlock()
	return g.release()
}

func (g *nodeDomain) release() error {
	var first error
	for _, r := range g.ranks {
		r.Invalidate()
	}
	for _, r := range g.ranks {
		if err := r.Release(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// releaseAll releases every global domain this node still holds.
func (n *node) releaseAll() {
	n.mu.Lock()
	ids := make([]uint64, 0, len(n.domains))
	for id := range n.domains {
		ids = append(ids, id)
	}
	n.mu.Unlock()
	for _, id := range ids {
		n.release(id)
	}
}

// Hosted is the number of global domains node w holds ranks of, from
// PREPARE until their release: what an ABORT or a RELEASE of each brings
// back to zero (tests of remote nodes check it on a local one).
func Hosted(w *engine.Worker) int {
	n := nodeOf(w)
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.domains)
}

// View is node w's committed view of global domain id: for each local
// worker hosting a rank, its context (get_global_domain).
func View(w *engine.Worker, id uint64) (map[int]*engine.RankView, error) {
	n := nodeOf(w)
	n.mu.Lock()
	g := n.domains[id]
	committed := g != nil && g.committed
	n.mu.Unlock()
	if !committed {
		return nil, engine.Errorf(engine.KeyError, "get_global_domain: no committed global domain %d on this node", id)
	}
	view := map[int]*engine.RankView{}
	for i, p := range g.req.Places {
		r := g.ranks[i]
		v := &engine.RankView{Name: g.req.Name, Rank: p.Rank, Size: g.req.Size, DeviceCtx: r.DeviceCtx(), WindowBase: r.WindowBase(),
			WindowSize: g.req.WindowSize, BufferPtrs: map[string]uint64{}, BufferSpecs: g.req.Buffers, Worker: p.Local}
		for j, b := range g.req.Buffers {
			v.BufferPtrs[b.Name] = v.WindowBase + uint64(g.offsets[j])
		}
		view[p.Local] = v
	}
	return view, nil
}

// Opened is one rank of a committed global domain on a local node, opened
// as a kernel on its chip opens it.
type Opened struct {
	Chip hal.Chip
	View *comm.View
	Rank *engine.RankView
}

// OpenLocal opens every rank of global domain id (n ranks) that top's
// local children host, by global rank: what Go code that plays the
// kernels of the whole domain needs (the scale test's ring, the bench's
// floor). Ranks hosted elsewhere stay zero.
func OpenLocal(top *engine.Worker, id uint64, n int) ([]Opened, error) {
	ranks := make([]Opened, n)
	for _, node := range top.Children() {
		view, err := View(node, id)
		if err != nil {
			return nil, err
		}
		for local, rv := range view {
			chip, err := node.Devices().Chip(local)
			if err != nil {
				return nil, err
			}
			v, err := comm.Open(chip, rv.DeviceCtx)
			if err != nil {
				return nil, err
			}
			ranks[rv.Rank] = Opened{chip, v, rv}
		}
	}
	return ranks, nil
}

// ReleaseHosted releases every global domain node w still holds: its
// close does, and a remote session's fuzzer does between inputs. Caller
// holds none of w's locks.
func ReleaseHosted(w *engine.Worker) { nodeOf(w).releaseAll() }

// The tables a node gets from the broker are wire's (wire/global.go):
// PREPARE carries the domain's name and buffers (wire.PrepareExtra),
// PREPARE's reply and IMPORT_TABLE descriptor tables
// (wire.DescriptorTable), COMM_INIT the topology (wire.Topology). These
// convert between them and the engine's values; a descriptor itself is
// hal/comm's layout, which comm encodes and decodes (engine.WireDescriptor
// and engine.CommDescriptors, which engine/proc shares).

// encodePrepareExtra is PREPARE's table for a domain of that name and
// those buffers.
func encodePrepareExtra(name string, buffers []engine.BufferSpec) []byte {
	p := prepareExtra(name, buffers)
	return wire.Payload(&p)
}

// prepareExtra is the name and buffer layout as wire's table.
func prepareExtra(name string, buffers []engine.BufferSpec) wire.PrepareExtra {
	p := wire.PrepareExtra{Name: name}
	for _, b := range buffers {
		p.Buffers = append(p.Buffers, wire.BufferSpec(b))
	}
	return p
}

// encodeDescs is the bytes of a descriptor table: PREPARE's reply.
func encodeDescs(ds []comm.Descriptor) []byte {
	t := engine.WireDescriptors(ds)
	return wire.Payload(&t)
}

// decodeDescs reads the descriptors of a table's bytes.
func decodeDescs(b []byte) ([]comm.Descriptor, error) {
	t, err := wire.DecodeDescriptorTable(b)
	if err != nil {
		return nil, engine.Errorf(engine.ValueError, "%w", err) // errors.Is still sees the wire error's class
	}
	return engine.CommDescriptors(t)
}

// faultPoints names the fault point of each global-domain command; the
// broker hits it for the node it sends to (nodeCmd), and a node hits its
// bare form for itself (command). Staging has none.
var faultPoints = map[wire.Command]string{wire.CmdCommInit: "global.comm_init", wire.CmdPrepare: "global.prepare",
	wire.CmdImportTable: "global.import", wire.CmdCommit: "global.commit", wire.CmdAbort: "global.abort", wire.CmdReleaseDomain: "global.release",
	wire.CmdReattach: "global.reattach"}

func init() {
	engine.RegisterControl(command, wire.CmdCommInit, wire.CmdPrepare, wire.CmdImportTable, wire.CmdCommit,
		wire.CmdStageTo, wire.CmdStageFrom, wire.CmdReattach, wire.CmdAbort, wire.CmdReleaseDomain)
}

// command serves a global-domain CONTROL command on a level-3 node: every
// kind of node runs it (in this process, in a child process, in a remote
// session), each reaching it through engine.Worker.Command. A daemon
// applies bare fault points to itself.
func command(w *engine.Worker, c wire.Control, r *wire.ControlReply) error {
	if err := fault.Hit(faultPoints[c.Cmd], -1); err != nil {
		return err
	}
	n := nodeOf(w)
	dm := c.Domain
	switch c.Cmd {
	case wire.CmdCommInit:
		if err := checkTopology(w, dm); err != nil {
			return err
		}
		return w.LocalDomains().InitComm()
	case wire.CmdPrepare:
		extra, err := wire.DecodePrepareExtra(dm.Table)
		if err != nil {
			return err
		}
		descs, err := n.prepare(nodeReqOf(dm, extra))
		r.Data = encodeDescs(descs)
		return err
	case wire.CmdImportTable:
		table, err := decodeDescs(dm.Table)
		if err != nil {
			return err
		}
		return n.importTable(dm.ID, table)
	case wire.CmdCommit:
		return n.commit(dm.ID)
	case wire.CmdStageTo, wire.CmdStageFrom:
		return n.stage(c, r)
	case wire.CmdReattach:
		return n.reattachCmd(dm)
	}
	return n.release(dm.ID) // ABORT and RELEASE_DOMAIN
}

// nodeTopology is what COMM_INIT tells a node of the domain's placement:
// the broker's cluster id, the node's rank among the member nodes, their
// number, the topology hash, and the global device rank of each of its
// ranks (in the command's rank order).
type nodeTopology struct {
	Cluster         uint64
	NodeRank, Nodes int
	Hash            string
	DeviceRanks     []int
}

// encode is t as COMM_INIT's table (wire.Topology).
func (t nodeTopology) encode() []byte { return wire.Payload(t.wire()) }

// wire is t in wire's form.
func (t nodeTopology) wire() *wire.Topology {
	w := &wire.Topology{Cluster: t.Cluster, NodeRank: uint32(t.NodeRank), Nodes: uint32(t.Nodes), Hash: t.Hash}
	for _, r := range t.DeviceRanks {
		w.DeviceRanks = append(w.DeviceRanks, uint32(r))
	}
	return w
}

// decodeTopology reads COMM_INIT's table.
func decodeTopology(b []byte) (nodeTopology, error) {
	w, err := wire.DecodeTopology(b)
	if err != nil {
		return nodeTopology{}, err
	}
	return topologyOf(&w), nil
}

// topologyOf is a decoded wire topology as the node checks it.
func topologyOf(w *wire.Topology) nodeTopology {
	t := nodeTopology{Cluster: w.Cluster, NodeRank: int(w.NodeRank), Nodes: int(w.Nodes), Hash: w.Hash}
	for _, r := range w.DeviceRanks {
		t.DeviceRanks = append(t.DeviceRanks, int(r))
	}
	return t
}

// checkTopology is COMM_INIT's re-check of what the broker assumed of
// node w: that its platform serves its profile (hal.Platform.Serves; the
// broker checked every member node has that one profile), the chips
// named, and each rank's global device rank against the node's own,
// where it has them.
func checkTopology(w *engine.Worker, dm wire.Domain) error {
	t, err := decodeTopology(dm.Table)
	if err != nil {
		return engine.Errorf(engine.ValueError, "COMM_INIT: a malformed topology: %v", err)
	}
	return checkNodeTopology(w, t, dm.Ranks)
}

// checkNodeTopology is checkTopology's check of a decoded topology for
// ranks (REATTACH has its topology decoded already).
func checkNodeTopology(w *engine.Worker, t nodeTopology, ranks []wire.DomainRank) error {
	if t.Cluster == 0 || len(t.DeviceRanks) != len(ranks) || t.Nodes < 1 || t.NodeRank < 0 || t.NodeRank >= t.Nodes {
		return engine.Errorf(engine.ValueError, "COMM_INIT: a topology of cluster %#x, node %d of %d, with %d device ranks for %d ranks", t.Cluster, t.NodeRank, t.Nodes, len(t.DeviceRanks), len(ranks))
	}
	cfg := configOf(w)
	if err := cfg.Platform.Serves(cfg.CommProfile); err != nil {
		return engine.Wrap(err, "COMM_INIT: this node")
	}
	for i, rk := range ranks {
		if int(rk.Worker) >= len(cfg.DeviceIDs) {
			return engine.Errorf(engine.ValueError, "COMM_INIT: local worker %d is not a chip of this node (0..%d)", rk.Worker, len(cfg.DeviceIDs)-1)
		}
		if own := cfg.GlobalDeviceRanks; len(own) != 0 && own[rk.Worker] != t.DeviceRanks[i] {
			return engine.Errorf(engine.ValueError, "COMM_INIT: rank %d on local worker %d: the broker assumes global device rank %d, this node's is %d", rk.Rank, rk.Worker, t.DeviceRanks[i], own[rk.Worker])
		}
	}
	return nil
}

// configOf is node w's configuration: engine.Worker.Config, which a test
// replaces to show the node a profile no Config can have.
var configOf = (*engine.Worker).Config

// stage copies into or out of the window of one rank this node hosts, in
// a committed domain (STAGE_TO, STAGE_FROM).
func (n *node) stage(c wire.Control, r *wire.ControlReply) error {
	op := c.Cmd.String()
	n.mu.Lock()
	g := n.domains[c.Domain.ID]
	committed := g != nil && g.committed && g.req.Gen == c.Domain.Generation
	n.mu.Unlock()
	if !committed {
		return engine.Errorf(engine.KeyError, "%s: no committed global domain %d (generation %d) on this node", op, c.Domain.ID, c.Domain.Generation)
	}
	i := slices.IndexFunc(g.req.Places, func(p Place) bool { return p.Rank == int(c.Rank) })
	if i < 0 {
		return engine.Errorf(engine.ValueError, "%s: rank %d of global domain %d is not on this node", op, c.Rank, c.Domain.ID)
	}
	// The wire decoder bounds both, but a node in the broker's own process
	// gets the command as the broker built it: NBytes as an int may be
	// negative, and Offset+n may wrap past 2^64 to a small number.
	want := c.NBytes
	if c.Cmd == wire.CmdStageTo {
		want = uint64(len(c.Data))
	}
	if !bounds.Fits(c.Offset, want, uint64(max(g.req.WindowSize, 0))) {
		return engine.Errorf(engine.ValueError, "%s: %d bytes at offset %d overrun the %d-byte window", op, want, c.Offset, g.req.WindowSize)
	}
	return g.ranks[i].Stage(c, r, int(want)) // at most the window's size, an int
}
