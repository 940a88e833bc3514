package engine

import (
	"fmt"
	"slices"

	"simpler/hal"
	"simpler/hal/comm"
	"simpler/hal/shm"
	"simpler/internal/bounds"
	"simpler/internal/fault"
	"simpler/wire"
)

// The node side of a global domain: what a level-3 worker does, for the
// ranks it hosts, when the broker's transaction reaches it. Every command
// is idempotent for an identical repeat and refuses a conflicting one, so
// a broker may resend after an uncertain answer.

// GlobalPlace puts one rank of a global domain on a local chip.
type GlobalPlace struct {
	Rank  int // in the whole domain
	Local int // this node's NEXT_LEVEL (chip) id
}

// nodeGlobalReq is what PREPARE tells a node.
type nodeGlobalReq struct {
	ID, Gen    uint64
	Name       string
	Size       int // ranks in the whole domain
	WindowSize int
	Places     []GlobalPlace
	Buffers    []BufferSpec
}

func (a nodeGlobalReq) same(b nodeGlobalReq) bool {
	return a.ID == b.ID && a.Gen == b.Gen && a.Name == b.Name && a.Size == b.Size &&
		a.WindowSize == b.WindowSize && slices.Equal(a.Places, b.Places) && slices.Equal(a.Buffers, b.Buffers)
}

// nodeGlobal is one global domain on this node.
type nodeGlobal struct {
	req       nodeGlobalReq
	offsets   []int
	ranks     []NodeRank // per place
	descs     []comm.Descriptor
	committed bool
}

// NodeRank is one rank of a global domain on a node's chip: a localRank
// when the chip is in this process, engine/proc's when the chip is a
// process of its own (ChipProcess.PrepareGlobalRank). The steps are
// hal/comm's GlobalRank's.
type NodeRank interface {
	Import(table []comm.Descriptor) error
	Commit() error
	Invalidate()
	Release() error
	DeviceCtx() uint64  // in the chip's address space
	WindowBase() uint64 // in the chip's address space
	// Stage copies n bytes at c.Offset into the window (STAGE_TO, from
	// c.Data) or out of it (STAGE_FROM, into reply.Data); the caller has
	// checked that they lie inside it.
	Stage(c wire.Control, reply *wire.ControlReply, n int) error
}

// localRank is a rank whose chip is in this process: staging is a copy
// in and out of the chip at the window.
type localRank struct {
	*comm.GlobalRank
	chip hal.Chip
}

func (r localRank) Stage(c wire.Control, reply *wire.ControlReply, n int) error {
	at := r.WindowBase() + c.Offset
	if c.Cmd == wire.CmdStageTo {
		return r.chip.CopyIn(at, c.Data)
	}
	reply.Data = make([]byte, n)
	return r.chip.CopyOut(reply.Data, at)
}

// globalPrefix starts the names of every window this node prepares, in
// this process or in its chip processes: under this process's prefix (so
// its leak check sees them) and this worker's namespace, so that no other
// worker of the process, with domain ids of its own broker, makes names
// of the same shape (comm.RemoveGlobalRank relies on that).
func (w *Worker) globalPrefix() string { return shm.Prefix() + w.namespace + "-" }

// globalPrepare makes a window for each of this node's ranks and returns
// their descriptors, in place order.
func (w *Worker) globalPrepare(req nodeGlobalReq) ([]comm.Descriptor, error) {
	w.mu.Lock()
	if err := w.ready("PREPARE"); err != nil {
		w.mu.Unlock()
		return nil, err
	}
	if g := w.globals[req.ID]; g != nil {
		w.mu.Unlock()
		if !g.req.same(req) {
			return nil, Errorf(ValueError, "PREPARE: global domain %d is already prepared here with other parameters", req.ID)
		}
		return g.descs, nil
	}
	w.mu.Unlock()
	offsets, err := bufferOffsets("PREPARE", req.Buffers, req.WindowSize)
	if err != nil {
		return nil, err
	}
	g := &nodeGlobal{req: req, offsets: offsets}
	for _, p := range req.Places {
		r, d, err := w.prepareRank(req, p, nil)
		if err != nil {
			g.release()
			return nil, err
		}
		g.ranks, g.descs = append(g.ranks, r), append(g.descs, d)
	}
	w.mu.Lock()
	w.globals[req.ID] = g
	w.mu.Unlock()
	return g.descs, nil
}

// prepareRank makes one rank's window and maps it into its chip, where
// the chip's memory is: here, or in the chip's own process. A non-nil
// reuse, the rank's descriptor in a REATTACH table, takes back the pooled
// window it names instead, sealed with its secret (hal/comm:
// GlobalRequest.Reuse), which only a chip in this process can.
func (w *Worker) prepareRank(req nodeGlobalReq, p GlobalPlace, reuse *comm.Descriptor) (NodeRank, comm.Descriptor, error) {
	if p.Local < 0 || p.Local >= len(w.chips) {
		return nil, comm.Descriptor{}, Errorf(ValueError, "PREPARE: local worker %d is not a chip of this node (0..%d)", p.Local, len(w.chips)-1)
	}
	gr := comm.GlobalRequest{Prefix: w.globalPrefix(), DomainID: req.ID, Generation: req.Gen, Name: req.Name,
		Ranks: req.Size, WindowSize: req.WindowSize, Timeout: CommTimeout}
	if w.chipProcs != nil && reuse != nil {
		return nil, comm.Descriptor{}, Errorf(KeyError, "REATTACH: this node's chips are processes, which do not pool their windows")
	}
	if w.chipProcs != nil {
		r, d, err := w.chipProcs[p.Local].PrepareGlobalRank(gr, p.Rank)
		if err != nil {
			return nil, d, err
		}
		return r, d, nil
	}
	gr.Pooled = true // a chip in this process: its window may be pooled (hal/comm)
	if reuse != nil {
		gr.Reuse, gr.ReuseSecret = reuse.Handle, reuse.Secret
	}
	r, d, err := comm.PrepareGlobal(gr, p.Rank, w.chips[p.Local])
	if err != nil {
		return nil, d, err // not r: a nil *GlobalRank in the interface is not nil
	}
	return localRank{r, w.chips[p.Local]}, d, nil
}

func (w *Worker) global(op string, id uint64) (*nodeGlobal, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.globals[id]
	if g == nil {
		return nil, Errorf(KeyError, "%s: no global domain %d on this node", op, id)
	}
	return g, nil
}

// globalImport gives every local rank the complete table. Each rank's
// import is atomic and idempotent (hal/comm), so a repeat is harmless.
func (w *Worker) globalImport(id uint64, table []comm.Descriptor) error {
	g, err := w.global("IMPORT", id)
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

// globalCommit makes the node's view visible to get_global_domain.
func (w *Worker) globalCommit(id uint64) error {
	g, err := w.global("COMMIT", id)
	if err != nil {
		return err
	}
	for _, r := range g.ranks {
		if err := r.Commit(); err != nil {
			return err
		}
	}
	w.mu.Lock()
	g.committed = true
	w.mu.Unlock()
	return nil
}

// globalRelease invalidates the view first, then frees the windows; ABORT
// is the same at any phase. Releasing an unknown domain is a no-op.
func (w *Worker) globalRelease(id uint64) error {
	w.mu.Lock()
	g := w.globals[id]
	if g == nil {
		w.mu.Unlock()
		return nil
	}
	g.committed = false
	delete(w.globals, id)
	w.mu.Unlock()
	return g.release()
}

func (g *nodeGlobal) release() error {
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

// HostedGlobals is the number of global domains this node holds ranks of,
// from PREPARE until their release: what an ABORT or a RELEASE of each
// brings back to zero (tests of remote nodes check it on a local one).
func (w *Worker) HostedGlobals() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.globals)
}

// GlobalView is this node's committed view of global domain id: for each
// local worker hosting a rank, its context.
func (w *Worker) GlobalView(id uint64) (map[int]*RankView, error) {
	w.mu.Lock()
	g := w.globals[id]
	w.mu.Unlock()
	if g == nil || !g.committed {
		return nil, Errorf(KeyError, "get_global_domain: no committed global domain %d on this node", id)
	}
	view := map[int]*RankView{}
	for i, p := range g.req.Places {
		r := g.ranks[i]
		v := &RankView{Name: g.req.Name, Rank: p.Rank, Size: g.req.Size, DeviceCtx: r.DeviceCtx(), WindowBase: r.WindowBase(),
			WindowSize: g.req.WindowSize, BufferPtrs: map[string]uint64{}, BufferSpecs: g.req.Buffers, Worker: p.Local}
		for j, b := range g.req.Buffers {
			v.BufferPtrs[b.Name] = v.WindowBase + uint64(g.offsets[j])
		}
		view[p.Local] = v
	}
	return view, nil
}

// CloseGlobals releases every global domain this node still holds (Close
// does; a remote session's fuzzer does between inputs). Caller holds no
// lock.
func (w *Worker) CloseGlobals() {
	w.mu.Lock()
	ids := make([]uint64, 0, len(w.globals))
	for id := range w.globals {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	for _, id := range ids {
		w.globalRelease(id)
	}
}

// The tables a node gets from the broker are wire's (wire/global.go):
// PREPARE carries the domain's name and buffers (wire.PrepareExtra),
// PREPARE's reply and IMPORT_TABLE descriptor tables
// (wire.DescriptorTable), COMM_INIT the topology (wire.Topology). These
// convert between them and the engine's values; a descriptor itself is
// hal/comm's layout, which comm encodes and decodes.

// A wire.Descriptor is the bytes of a comm.Descriptor: the sizes agree, or
// this constant overflows and the package does not build.
const _ = uint(comm.DescriptorSize-wire.DescriptorSize) + uint(wire.DescriptorSize-comm.DescriptorSize)

// encodePrepareExtra is PREPARE's table for a domain of that name and
// those buffers.
func encodePrepareExtra(name string, buffers []BufferSpec) []byte {
	p := prepareExtra(name, buffers)
	return wire.Payload(&p)
}

// prepareExtra is the name and buffer layout as wire's table.
func prepareExtra(name string, buffers []BufferSpec) wire.PrepareExtra {
	p := wire.PrepareExtra{Name: name}
	for _, b := range buffers {
		p.Buffers = append(p.Buffers, wire.BufferSpec(b))
	}
	return p
}

// WireDescriptor is d in hal/comm's layout.
func WireDescriptor(d comm.Descriptor) (w wire.Descriptor) {
	copy(w[:], comm.EncodeDescriptor(d))
	return w
}

// WireDescriptors is ds as a table, in their order.
func WireDescriptors(ds []comm.Descriptor) wire.DescriptorTable {
	var t wire.DescriptorTable
	for _, d := range ds {
		t.Descriptors = append(t.Descriptors, WireDescriptor(d))
	}
	return t
}

// CommDescriptors decodes every descriptor of a table (comm's decoder is
// canonical, so a table that decodes re-encodes to the same bytes).
func CommDescriptors(t wire.DescriptorTable) ([]comm.Descriptor, error) {
	var ds []comm.Descriptor
	for i := range t.Descriptors {
		d, err := comm.DecodeDescriptor(t.Descriptors[i][:])
		if err != nil {
			return nil, Wrap(err, fmt.Sprintf("descriptor %d", i))
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// encodeDescs is the bytes of a descriptor table: PREPARE's reply.
func encodeDescs(ds []comm.Descriptor) []byte {
	t := WireDescriptors(ds)
	return wire.Payload(&t)
}

// decodeDescs reads the descriptors of a table's bytes.
func decodeDescs(b []byte) ([]comm.Descriptor, error) {
	t, err := wire.DecodeDescriptorTable(b)
	if err != nil {
		return nil, Errorf(ValueError, "%w", err) // errors.Is still sees the wire error's class
	}
	return CommDescriptors(t)
}

// globalFaultPoints names the fault point of each global-domain command;
// the broker hits it for the node it sends to (nodeCmd), and a node hits
// its bare form for itself (GlobalCommand). Staging has none.
var globalFaultPoints = map[wire.Command]string{wire.CmdCommInit: "global.comm_init", wire.CmdPrepare: "global.prepare",
	wire.CmdImportTable: "global.import", wire.CmdCommit: "global.commit", wire.CmdAbort: "global.abort", wire.CmdReleaseDomain: "global.release",
	wire.CmdReattach: "global.reattach"}

// GlobalCommand serves a global-domain CONTROL command on a level-3 node:
// every kind of node runs it (in this process, in a child process, in a
// remote session, whose package reaches it only through this method). A
// daemon applies bare fault points to itself.
func (w *Worker) GlobalCommand(c wire.Control, r *wire.ControlReply) error {
	if err := fault.Hit(globalFaultPoints[c.Cmd], -1); err != nil {
		return err
	}
	dm := c.Domain
	switch c.Cmd {
	case wire.CmdCommInit:
		if err := w.checkTopology(dm); err != nil {
			return err
		}
		return w.domains.initComm()
	case wire.CmdPrepare:
		extra, err := wire.DecodePrepareExtra(dm.Table)
		if err != nil {
			return err
		}
		descs, err := w.globalPrepare(prepareReq(dm, extra))
		r.Data = encodeDescs(descs)
		return err
	case wire.CmdImportTable:
		table, err := decodeDescs(dm.Table)
		if err != nil {
			return err
		}
		return w.globalImport(dm.ID, table)
	case wire.CmdCommit:
		return w.globalCommit(dm.ID)
	case wire.CmdStageTo, wire.CmdStageFrom:
		return w.globalStage(c, r)
	case wire.CmdReattach:
		return w.globalReattachCmd(dm)
	}
	return w.globalRelease(dm.ID) // ABORT and RELEASE_DOMAIN
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

// checkTopology is COMM_INIT's re-check of what the broker assumed of this
// node: that its platform serves its profile (hal.Platform.Serves; the
// broker checked every member node has that one profile), the chips
// named, and each rank's global device rank against this node's own,
// where it has them.
func (w *Worker) checkTopology(dm wire.Domain) error {
	t, err := decodeTopology(dm.Table)
	if err != nil {
		return Errorf(ValueError, "COMM_INIT: a malformed topology: %v", err)
	}
	return w.checkNodeTopology(t, dm.Ranks)
}

// checkNodeTopology is checkTopology's check of a decoded topology for
// ranks (REATTACH has its topology decoded already).
func (w *Worker) checkNodeTopology(t nodeTopology, ranks []wire.DomainRank) error {
	if t.Cluster == 0 || len(t.DeviceRanks) != len(ranks) || t.Nodes < 1 || t.NodeRank < 0 || t.NodeRank >= t.Nodes {
		return Errorf(ValueError, "COMM_INIT: a topology of cluster %#x, node %d of %d, with %d device ranks for %d ranks", t.Cluster, t.NodeRank, t.Nodes, len(t.DeviceRanks), len(ranks))
	}
	if err := w.cfg.Platform.Serves(w.cfg.CommProfile); err != nil {
		return Wrap(err, "COMM_INIT: this node")
	}
	for i, rk := range ranks {
		if int(rk.Worker) >= len(w.cfg.DeviceIDs) {
			return Errorf(ValueError, "COMM_INIT: local worker %d is not a chip of this node (0..%d)", rk.Worker, len(w.cfg.DeviceIDs)-1)
		}
		if own := w.cfg.GlobalDeviceRanks; len(own) != 0 && own[rk.Worker] != t.DeviceRanks[i] {
			return Errorf(ValueError, "COMM_INIT: rank %d on local worker %d: the broker assumes global device rank %d, this node's is %d", rk.Rank, rk.Worker, t.DeviceRanks[i], own[rk.Worker])
		}
	}
	return nil
}

// globalStage copies into or out of the window of one rank this node
// hosts, in a committed domain (STAGE_TO, STAGE_FROM).
func (w *Worker) globalStage(c wire.Control, r *wire.ControlReply) error {
	op := c.Cmd.String()
	w.mu.Lock()
	g := w.globals[c.Domain.ID]
	committed := g != nil && g.committed && g.req.Gen == c.Domain.Generation
	w.mu.Unlock()
	if !committed {
		return Errorf(KeyError, "%s: no committed global domain %d (generation %d) on this node", op, c.Domain.ID, c.Domain.Generation)
	}
	i := slices.IndexFunc(g.req.Places, func(p GlobalPlace) bool { return p.Rank == int(c.Rank) })
	if i < 0 {
		return Errorf(ValueError, "%s: rank %d of global domain %d is not on this node", op, c.Rank, c.Domain.ID)
	}
	// The wire decoder bounds both, but a node in the broker's own process
	// gets the command as the broker built it: NBytes as an int may be
	// negative, and Offset+n may wrap past 2^64 to a small number.
	want := c.NBytes
	if c.Cmd == wire.CmdStageTo {
		want = uint64(len(c.Data))
	}
	if !bounds.Fits(c.Offset, want, uint64(max(g.req.WindowSize, 0))) {
		return Errorf(ValueError, "%s: %d bytes at offset %d overrun the %d-byte window", op, want, c.Offset, g.req.WindowSize)
	}
	return g.ranks[i].Stage(c, r, int(want)) // at most the window's size, an int
}
