package engine

import (
	"simpler/hal"
	"simpler/hal/comm"
	"simpler/internal/hostid"
	"simpler/internal/race"
	"simpler/wire"
)

// A slot is one NEXT_LEVEL or SUB place of a Worker's tree, of one kind:
// a chip of this process or a chip's process, a SUB worker here or in a
// process, a child Worker here, a level-3 node's process, a remote node.
// The tree makes each slot once at Init, where the mode is read
// (tree.open); after that every question a kind answers its own way
// (how a member runs, how the slot ends, where its chip's memory is) is
// a method of the slot, and nothing asks the mode again.
type slot interface {
	// endpoint makes the endpoint that runs the slot's members.
	endpoint(t *tree) Endpoint
	// depth is how many members the slot is given at once.
	depth() int
	// process is the child process behind the slot, or nil: what the
	// registry ships its callables to.
	process() Process
	// close ends the slot and waits for what serves it.
	close() error
	// kill ends the slot at once, so that whatever waits on it returns.
	kill()
}

// ChipMemory is a chip's device memory as its Worker reaches it from
// outside a task: what a chip of this process and a chip's process both
// serve. A chip's process keeps its memory there, so there are no bytes
// to hand out and no windows to map from this side.
type ChipMemory interface {
	DeviceID() int
	Platform() hal.Platform
	// Malloc reserves size bytes of zeroed device memory.
	Malloc(size int) (uint64, error)
	// Free releases an allocation by its start address.
	Free(ptr uint64) error
	// CopyIn copies src into device memory at dst.
	CopyIn(dst uint64, src []byte) error
	// CopyOut copies device memory at src into dst.
	CopyOut(dst []byte, src uint64) error
	// Check fails unless [ptr, ptr+size) lies in one live region.
	Check(ptr uint64, size int) error
}

// LocalChip is a chip of a level-3 node as the roles layered on its
// Worker reach it (engine/global's node side): its memory, and the ranks
// of global domains, made where the memory is.
type LocalChip interface {
	Memory() ChipMemory
	// PrepareGlobalRank is PREPARE of one rank of a global domain on the
	// chip. A req.Reuse (REATTACH) takes back a pooled window, which only a
	// chip of this process pools. On an error nothing of the rank is left.
	PrepareGlobalRank(req comm.GlobalRequest, rank int) (NodeRank, comm.Descriptor, error)
}

// chipSlot is a chip: the NEXT_LEVEL slots of levels 2 and 3.
type chipSlot interface {
	slot
	LocalChip
	// here is the chip when it is in this process, nil when it is a
	// process of its own (its memory is not mapped here).
	here() hal.Chip
	// runKernel runs a level-2 kernel synchronously.
	runKernel(h *Handle, args *TaskArgs) error
	// allocateRank runs one rank's part of a domain allocation.
	allocateRank(req comm.Request, rank int) (DomainRank, error)
	// raceTag is the race detector's tag of the chip's memory.
	raceTag(d *race.Detector) uintptr
}

// nodeSlot is a node: the NEXT_LEVEL slots of level 4 and up.
type nodeSlot interface {
	slot
	// node is how a broker commands the node (global domains).
	node() Node
	// host is the host the node runs on.
	host() hostid.ID
	// remote is the remote node, or nil for a node of this host.
	remote() RemoteNode
}

// hereMemory is a chip of this process seen as ChipMemory.
type hereMemory struct{ hal.Chip }

func (m hereMemory) Check(ptr uint64, size int) error {
	_, err := m.Bytes(ptr, size)
	return err
}

// hereChip is a chip of this process (thread mode): its kernels run on
// the endpoint's goroutine, over memory mapped here.
type hereChip struct {
	chip hal.Chip
	mem  ChipMemory
}

func newHereChip(c hal.Chip) *hereChip { return &hereChip{chip: c, mem: hereMemory{c}} }

func (s *hereChip) endpoint(t *tree) Endpoint { return t.loop(s.run, true, false) }
func (s *hereChip) depth() int                { return 1 }
func (s *hereChip) process() Process          { return nil }
func (s *hereChip) close() error              { return s.chip.Close() }
func (s *hereChip) kill()                     {}
func (s *hereChip) here() hal.Chip            { return s.chip }
func (s *hereChip) Memory() ChipMemory        { return s.mem }

func (s *hereChip) raceTag(d *race.Detector) uintptr { return d.ChipTag(s.chip) }

func (s *hereChip) run(e *loopEndpoint, a Assignment) error {
	t := taskOf(a.Task)
	if e.chip.Chip == nil { // the endpoint's chip never changes: made once
		e.chip = ChipCtx{WorkerID: a.Target, Chip: s.chip, Local: &e.local, Stop: &e.stop}
	}
	e.chip.Race = e.raceCtx
	return RunChipKernel(&e.chip, t.handle.Callable.(ChipKernel), &t.args[a.Member])
}

func (s *hereChip) runKernel(h *Handle, args *TaskArgs) error {
	var local any
	return RunChipKernel(&ChipCtx{Chip: s.chip, Local: &local}, h.Callable.(ChipKernel), args)
}

func (s *hereChip) allocateRank(req comm.Request, rank int) (DomainRank, error) {
	r, err := comm.Allocate(req, rank, s.chip)
	if err != nil {
		return DomainRank{}, err
	}
	dr := DomainRank{DeviceCtx: r.DeviceCtx, WindowBase: r.WindowBase, WindowSize: r.WindowSize, Release: r.Release}
	if win, err := s.chip.Bytes(r.WindowBase, r.WindowSize); err == nil && win != nil {
		dr.RaceKey = race.Key(race.Addr(win))
	}
	return dr, nil
}

func (s *hereChip) PrepareGlobalRank(req comm.GlobalRequest, rank int) (NodeRank, comm.Descriptor, error) {
	req.Pooled = true // a chip of this process: its window may be pooled (hal/comm)
	r, d, err := comm.PrepareGlobal(req, rank, s.chip)
	if err != nil {
		return nil, d, err // not r: a nil *GlobalRank in the interface is not nil
	}
	return hereRank{r, s.chip}, d, nil
}

// hereRank is a global domain's rank on a chip of this process: staging
// is a copy in and out of the chip at the window.
type hereRank struct {
	*comm.GlobalRank
	chip hal.Chip
}

func (r hereRank) Stage(c wire.Control, reply *wire.ControlReply, n int) error {
	at := r.WindowBase() + c.Offset
	if c.Cmd == wire.CmdStageTo {
		return r.chip.CopyIn(at, c.Data)
	}
	reply.Data = make([]byte, n)
	return r.chip.CopyOut(reply.Data, at)
}

// procChip is a chip in a process of its own (process mode): a member
// runs there, and under --race the process records it.
type procChip struct{ p ChipProcess }

func (s *procChip) endpoint(t *tree) Endpoint { return t.loop(s.run, false, true) }
func (s *procChip) depth() int                { return 1 }
func (s *procChip) process() Process          { return s.p }
func (s *procChip) close() error              { return s.p.Close() }
func (s *procChip) kill()                     { s.p.Kill() }
func (s *procChip) here() hal.Chip            { return nil }
func (s *procChip) Memory() ChipMemory        { return s.p.Memory() }

func (s *procChip) raceTag(d *race.Detector) uintptr { return d.ChipTag(s.p) }

func (s *procChip) run(e *loopEndpoint, a Assignment) (err error) {
	t := taskOf(a.Task)
	if e.raceCtx != nil {
		e.raceLog, err = s.p.RunRecorded(t.handle, &t.args[a.Member], &e.stop, s.raceTag(e.w.cfg.Race))
		return err
	}
	return s.p.Run(t.handle, &t.args[a.Member], nil, &e.stop)
}

func (s *procChip) runKernel(h *Handle, args *TaskArgs) error { return s.p.Run(h, args, nil, nil) }

func (s *procChip) allocateRank(req comm.Request, rank int) (DomainRank, error) {
	return s.p.AllocateRank(req, rank)
}

func (s *procChip) PrepareGlobalRank(req comm.GlobalRequest, rank int) (NodeRank, comm.Descriptor, error) {
	if req.Reuse != "" {
		return nil, comm.Descriptor{}, Errorf(KeyError, "REATTACH: this node's chips are processes, which do not pool their windows")
	}
	return s.p.PrepareGlobalRank(req, rank)
}

// hereSub is a SUB worker of this process: its callable runs on the
// endpoint's goroutine.
type hereSub struct{}

func (hereSub) endpoint(t *tree) Endpoint { return t.loop(hereSub{}.run, true, false) }
func (hereSub) depth() int                { return 1 }
func (hereSub) process() Process          { return nil }
func (hereSub) close() error              { return nil }
func (hereSub) kill()                     {}

func (hereSub) run(e *loopEndpoint, a Assignment) error {
	t := taskOf(a.Task)
	return t.handle.Callable.(SubCallable).RunSub(&SubCtx{WorkerID: a.Target, Local: &e.local, Stop: &e.stop, Race: e.raceCtx}, &t.args[a.Member])
}

// procSub is a SUB worker in a process of its own.
type procSub struct{ p Process }

func (s *procSub) endpoint(t *tree) Endpoint { return t.loop(s.run, false, true) }
func (s *procSub) depth() int                { return 1 }
func (s *procSub) process() Process          { return s.p }
func (s *procSub) close() error              { return s.p.Close() }
func (s *procSub) kill()                     { s.p.Kill() }

func (s *procSub) run(e *loopEndpoint, a Assignment) (err error) {
	t := taskOf(a.Task)
	if e.raceCtx != nil {
		e.raceLog, err = s.p.RunRecorded(t.handle, &t.args[a.Member], &e.stop, e.w.cfg.Race.ChipTag(s.p))
		return err
	}
	return s.p.Run(t.handle, &t.args[a.Member], nil, &e.stop)
}

// hereNode is a child Worker of this process: a member is a run of it,
// and stopping the member cancels that run.
type hereNode struct{ w *Worker }

func (s *hereNode) endpoint(t *tree) Endpoint { return t.loop(s.run, true, false) }
func (s *hereNode) depth() int                { return 1 }
func (s *hereNode) process() Process          { return nil }
func (s *hereNode) close() error              { return s.w.closeTree() }
func (s *hereNode) kill()                     { s.w.tree.kill() }
func (s *hereNode) node() Node                { return localNode{s.w} }
func (s *hereNode) host() hostid.ID           { return hostid.Local() }
func (s *hereNode) remote() RemoteNode        { return nil }

func (s *hereNode) run(e *loopEndpoint, a Assignment) error {
	t := taskOf(a.Task)
	oc, args, cfg := t.handle.Callable.(OrchCallable), &t.args[a.Member], t.cfg
	r, err := s.w.submit(func(o *Orchestrator) (any, error) { return nil, oc.RunOrch(o, args, &cfg) }, &e.stop, e.raceCtx)
	if err != nil {
		return err
	}
	defer r.RaceWait(e.raceCtx)()
	return r.Wait(-1)
}

// localNode is a level-3 child Worker in this process as a Node.
type localNode struct{ w *Worker }

func (n localNode) Command(c *wire.Control) (wire.ControlReply, error) {
	r := wire.ControlReply{Cmd: c.Cmd}
	err := n.w.Command(*c, &r)
	return r, err
}

// procNode is a level-3 node in a process of its own, reached by its
// mailbox; the process checks what it runs itself under --race. plan is
// the child Worker it was configured as, which never starts here and
// closes with the slot.
type procNode struct {
	p    NodeProcess
	plan *Worker
}

func (s *procNode) endpoint(t *tree) Endpoint { return t.loop(s.run, false, false) }
func (s *procNode) depth() int                { return 1 }
func (s *procNode) process() Process          { return s.p }
func (s *procNode) close() error {
	err := s.p.Close()
	if e := s.plan.closeTree(); err == nil {
		err = e
	}
	return err
}
func (s *procNode) kill()              { s.p.Kill() }
func (s *procNode) node() Node         { return s.p }
func (s *procNode) host() hostid.ID    { return hostid.Local() }
func (s *procNode) remote() RemoteNode { return nil }

func (s *procNode) run(e *loopEndpoint, a Assignment) error {
	t := taskOf(a.Task)
	return s.p.Run(t.handle, &t.args[a.Member], &t.cfg, &e.stop)
}

// remoteSlot is a remote level-3 node (add_remote_worker's, or a rank of
// a worker group): its endpoint sends TASK frames, up to RemoteDepth
// ahead, and its reader reports them.
type remoteSlot struct {
	n    RemoteNode
	name string // as errors name it
}

func (s *remoteSlot) endpoint(t *tree) Endpoint { return &remoteEndpoint{w: t.w, n: s.n} }
func (s *remoteSlot) depth() int                { return RemoteDepth }
func (s *remoteSlot) process() Process          { return nil }
func (s *remoteSlot) close() error              { s.n.Close(); return nil }
func (s *remoteSlot) kill()                     { s.n.Fail(Errorf(RuntimeError, "%s: ended by close", s.name)) }
func (s *remoteSlot) node() Node                { return remoteCommands{s.n} }
func (s *remoteSlot) host() hostid.ID           { return s.n.Host() }
func (s *remoteSlot) remote() RemoteNode        { return s.n }

// remoteCommands is a remote node as a Node: its ordered command lane.
type remoteCommands struct{ n RemoteNode }

func (c remoteCommands) Command(m *wire.Control) (wire.ControlReply, error) { return c.n.Control(m) }

// goneNode is a node the tree no longer has (before Init, after close).
type goneNode struct{ id int }

func (g goneNode) Command(*wire.Control) (wire.ControlReply, error) {
	return wire.ControlReply{}, Errorf(RuntimeError, "worker %d is gone", g.id)
}
