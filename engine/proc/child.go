package proc

import (
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/hal/comm"
	"simpler/hal/shm"
	"simpler/internal/bounds"
	"simpler/internal/futex"
	"simpler/internal/orphan"
	"simpler/internal/race"
	"simpler/wire"
)

// Child roles, wire's.
const (
	roleChip = wire.RoleChip
	roleSub  = wire.RoleSub
	roleNode = wire.RoleNode // a level-3 worker with its own chips and SUB workers
)

// The steps of opGlobalRank, wire's: a level-3 node whose chips are
// processes runs each rank's part of a global domain (hal/comm's
// GlobalRank) in the process of the rank's chip, where the chip's memory
// is.
const (
	grPrepare    = wire.RankPrepare    // → descriptor, window base
	grImport     = wire.RankImport     // the table → device ctx
	grCommit     = wire.RankCommit     // → ()
	grInvalidate = wire.RankInvalidate // → ()
	grRelease    = wire.RankRelease    // → (); an unknown rank is already released
)

// child is the state of a chip or SUB worker process.
type child struct {
	mb       *mailbox
	role     uint8
	workerID int
	chip     hal.Chip
	node     *engine.Worker  // roleNode
	race     *race.Detector  // roleNode under --race (race.go)
	raceDoms map[uint64]bool // the global domains live here, under --race (race.go)
	resolver engine.Resolver
	prefix   string // the parent's shm prefix, for domain names
	ppid     int

	mu        sync.Mutex
	callables map[string]engine.Callable    // by digest
	attached  *mappings                     // the parent's host objects mapped here (attach.go)
	ranks     map[uint64]*comm.Rank         // by allocation id
	granks    map[grankKey]*comm.GlobalRank // global-domain ranks on this chip (opGlobalRank)
	local     any                           // the task lane's binding state
	chipCtx   engine.ChipCtx
	tasks     uint64         // tasks the task lane has received (the running one's number)
	taskStop  engine.Stopper // stops the task the task lane runs (OpCancel)
	done      chan struct{}
	// fence orders the lanes for Go's memory model: the parent never sends
	// a request that depends on another lane's until that one's reply
	// came, but that ordering runs through another process, where the
	// race detector cannot see it. Each lane loads fence before handling a
	// request and adds to it after, which states the same order here.
	fence    atomic.Uint64
	stopOnce sync.Once
}

// RunChild serves the mailbox named name until the parent shuts it down
// or goes away; it is the whole life of a child process (the launcher's
// hidden subcommand calls it). newResolver turns the parent's bundle into
// a Resolver.
func RunChild(name string, newResolver func(bundle []byte) (engine.Resolver, error)) error {
	// No sweep: names carry no pid an earlier process could have left
	// objects under, and the process that started the tree sweeps.
	mb, err := openMailbox(name)
	if err != nil {
		return err
	}
	defer mb.seg.Close()
	c := &child{mb: mb, ppid: os.Getppid(), callables: map[string]engine.Callable{}, attached: newMappings(),
		ranks: map[uint64]*comm.Rank{}, granks: map[grankKey]*comm.GlobalRank{}, done: make(chan struct{})}
	ctl := mb.lanes[laneControl]
	req, live, err := ctl.next(c.parentGone)
	if !live {
		return nil
	}
	if err == nil {
		err = c.init(req, newResolver)
	}
	if err != nil {
		ctl.reply(encodeError(err)) // the parent reports it
		c.shutdown()
		return nil
	}
	ctl.reply([]byte{statusOK})
	// A child whose parent died while a kernel runs (the lanes notice an
	// absent parent only between requests) stops the kernel and ends
	// within orphan.Grace.
	endWatch := orphan.Watch(nil, func() {
		c.stop()
		c.taskStop.Stop("the parent process died")
	})
	defer endWatch()
	task := mb.lanes[laneTask]
	taskDone := make(chan struct{})
	go func() {
		defer close(taskDone)
		c.serve(task, c.task)
	}()
	c.serve(ctl, c.control)
	futex.Wake(task.reqSeq) // let the task lane see done now, not at its next poll
	<-taskDone              // it reads the mailbox until it returns
	c.shutdown()
	return nil
}

// stop ends both lanes.
func (c *child) stop() { c.stopOnce.Do(func() { close(c.done) }) }

func (c *child) parentGone() bool {
	select {
	case <-c.done:
		return true
	default:
	}
	if os.Getppid() != c.ppid {
		c.stop()
		return true
	}
	return false
}

// init takes up the role the parent's first request gives, all of which
// decodes before any of it is acted on.
func (c *child) init(req []byte, newResolver func([]byte) (engine.Resolver, error)) error {
	m, err := wire.DecodeMailboxInit(req)
	if err != nil {
		return err
	}
	c.role, c.workerID, c.prefix = m.Role, m.WorkerID, m.Prefix
	if c.prefix != shm.Prefix() {
		// Its domains' objects are created under the parent's prefix,
		// which this process's lock must cover (spawn passes it on).
		return engine.Errorf(engine.RuntimeError, "the child's shm prefix %q is not its parent's %q (was %s dropped from its environment?)", shm.Prefix(), c.prefix, shm.PrefixEnv)
	}
	switch c.role {
	case roleChip:
		if c.chip, err = openChip(m.Platform, m.Device); err != nil {
			return err
		}
	case roleNode:
		cfg, err := configOf(m.Node)
		if err != nil {
			return err
		}
		// The node's own chips are processes too if its mode says so:
		// this binary again, by the same transport.
		cfg.Launcher, cfg.Spawn = &engine.Launcher{Path: m.Path, Args: m.Args, Bundle: m.Bundle}, Spawner{}
		c.race = cfg.Race // the node's detector under --race (configOf made it)
		if c.node, err = engine.NewWorker(cfg); err != nil {
			return err
		}
		if err := c.node.Init(); err != nil { // the whole subtree is up before the reply
			c.node.Close()
			c.node = nil
			return err
		}
	}
	if c.resolver, err = newResolver(m.Bundle); err == nil {
		raceResolver(c.resolver, c.race)
	}
	return err
}

func openChip(platform string, device int) (hal.Chip, error) {
	p, err := hal.Lookup(platform)
	if err != nil {
		return nil, err
	}
	return p.OpenChip(device)
}

// serve answers requests on one lane until shutdown or the parent goes.
// handle decodes the whole request before it acts on any of it.
func (c *child) serve(l *lane, handle func(req []byte) ([]byte, error)) {
	for {
		req, live, err := l.next(c.parentGone)
		if !live {
			return
		}
		// Read before the reply: once it is sent, the parent may write its
		// next request over this one.
		shutdown := len(req) > 0 && req[0] == opShutdown
		c.fence.Load()
		var resp []byte
		if err == nil {
			resp, err = handle(req)
		}
		c.fence.Add(1)
		if err != nil {
			resp = encodeError(err)
		}
		l.reply(resp)
		if shutdown {
			c.stop()
			return
		}
	}
}

func ok(build func(e *wire.Encoder)) []byte {
	var e wire.Encoder
	e.U8(statusOK)
	if build != nil {
		build(&e)
	}
	return e.Bytes()
}

// task runs kernels, SUB callables and a node's orchestration functions.
func (c *child) task(req []byte) ([]byte, error) {
	m, err := wire.DecodeMailboxTask(req)
	if err != nil {
		return nil, err
	}
	var held []*mapping // the task's host objects: not dropped while it runs
	defer func() { c.release(held) }()
	args, err := taskArgs(&m, func(ref hostRef) (uint64, error) { return c.attach(ref, &held) })
	if err != nil {
		return nil, err
	}
	cfg, op := engine.CallConfigOf(m.Config), m.Op
	c.mu.Lock()
	fn := c.callables[m.Digest]
	c.tasks++
	c.taskStop.Reset()
	c.mu.Unlock()
	if fn == nil {
		return nil, engine.Errorf(engine.RuntimeError, "callable %s is not registered in this child", m.Digest)
	}
	var rec *race.Ctx // records the member for the parent's --race
	if m.RaceTag != 0 && c.role != roleNode {
		rec = race.NewRecorder(uintptr(m.RaceTag))
	}
	switch {
	case op == opRunChip && c.role == roleChip:
		k, isKernel := fn.(engine.ChipKernel)
		if !isKernel {
			return nil, engine.Errorf(engine.TypeError, "%q cannot run as a chip kernel", fn.Name())
		}
		c.chipCtx = engine.ChipCtx{WorkerID: c.workerID, Chip: c.chip, Local: &c.local, Stop: &c.taskStop, Race: rec}
		err = engine.RunChipKernel(&c.chipCtx, k, args)
	case op == opRunOrch && c.role == roleNode:
		oc, isOrch := fn.(engine.OrchCallable)
		if !isOrch {
			return nil, engine.Errorf(engine.TypeError, "%q cannot run as an orchestration function", fn.Name())
		}
		var r *engine.Run
		if r, err = c.node.SubmitStoppable(func(o *engine.Orchestrator) (any, error) { return nil, oc.RunOrch(o, args, &cfg) }, &c.taskStop); err == nil {
			err = c.waitRun(r)
		}
	case op == opRunSub && c.role == roleSub:
		s, isSub := fn.(engine.SubCallable)
		if !isSub {
			return nil, engine.Errorf(engine.TypeError, "%q cannot run as a SUB callable", fn.Name())
		}
		err = s.RunSub(&engine.SubCtx{WorkerID: c.workerID, Local: &c.local, Stop: &c.taskStop, Race: rec}, args)
	default:
		return nil, engine.Errorf(engine.RuntimeError, "task op %d does not fit a child of role %d", op, c.role)
	}
	if err != nil && rec != nil {
		return nil, &loggedError{err: err, log: rec.Log()}
	}
	if err != nil {
		return nil, err
	}
	if rec != nil {
		return ok(func(e *wire.Encoder) { e.Blob(rec.Log()) }), nil
	}
	return ok(nil), nil
}

// control answers registration, memory and domain requests. The whole
// request is decoded before any of it runs.
func (c *child) control(req []byte) ([]byte, error) {
	r, err := wire.DecodeMailboxControl(req)
	if err != nil {
		return nil, err
	}
	switch r.Op {
	case opRegister:
		fn, err := c.resolver.Resolve(r.Digest, r.Module, r.Name)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.callables[r.Digest] = fn
		c.mu.Unlock()
		if c.node != nil { // registration flows down the node's own tree
			if _, err := c.node.Registry().Register(fn, nil); err != nil {
				return nil, err
			}
		}
		return ok(nil), nil
	case opShutdown, wire.OpPing:
		return ok(nil), nil
	case wire.OpRaceCount:
		return c.raceCount(), nil
	case wire.OpCancel:
		c.mu.Lock()
		current := c.tasks == r.Task
		c.mu.Unlock()
		if current {
			c.taskStop.Stop(r.Reason)
		}
		return ok(nil), nil
	case opGlobal:
		if c.node == nil {
			return nil, engine.Errorf(engine.RuntimeError, "a global-domain command needs a level-3 node; this child is a chip or SUB worker")
		}
		reply := wire.ControlReply{Seq: 1, Cmd: r.Global.Cmd} // the mailbox has no sequence; the codec wants one
		if err := c.node.Command(r.Global, &reply); err != nil {
			return nil, err
		}
		c.raceGlobal(r.Global)
		return ok(reply.Encode), nil
	}
	if c.chip == nil {
		return nil, engine.Errorf(engine.RuntimeError, "op %d needs a chip; this is a SUB worker", r.Op)
	}
	return c.chipControl(&r)
}

// chipControl answers the requests that need this child's chip.
func (c *child) chipControl(r *wire.MailboxControl) ([]byte, error) {
	switch r.Op {
	case opMalloc:
		p, err := c.chip.Malloc(r.Size)
		reply := wire.AddrReply{Addr: p}
		return ok(reply.Encode), err
	case opFree:
		return ok(nil), c.chip.Free(r.Ptr)
	case opCheck:
		_, err := c.chip.Bytes(r.Ptr, r.Size)
		return ok(nil), err
	case opCopyIn, opCopyOut:
		var held []*mapping
		defer func() { c.release(held) }()
		host, err := c.hostBytes(r.Host, r.Size, &held)
		if err != nil {
			return nil, err
		}
		if r.Op == opCopyIn {
			return ok(nil), c.chip.CopyIn(r.Ptr, host)
		}
		return ok(nil), c.chip.CopyOut(host, r.Ptr)
	case opCommAlloc:
		return c.commAlloc(&r.Comm)
	case opGlobalRank:
		return c.globalRank(&r.GlobalRank)
	case opCommRelease:
		c.mu.Lock()
		rank := c.ranks[r.Ptr]
		delete(c.ranks, r.Ptr)
		c.mu.Unlock()
		if rank == nil {
			return nil, engine.Errorf(engine.ValueError, "no domain rank with allocation id %d here", r.Ptr)
		}
		return ok(nil), rank.Release()
	}
	return nil, engine.Errorf(engine.RuntimeError, "unknown control op %d", r.Op)
}

// commAlloc runs this child's rank of a domain allocation, under its
// parent's prefix.
func (c *child) commAlloc(a *wire.CommAlloc) ([]byte, error) {
	req := comm.Request{Namespace: a.Namespace, AllocationID: a.AllocationID, Name: a.Name, Ranks: a.Ranks,
		WindowSize: a.WindowSize, Timeout: a.Timeout, Prefix: c.prefix, Key: a.Key}
	rank, err := comm.Allocate(req, a.Rank, c.chip)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.ranks[req.AllocationID] = rank
	c.mu.Unlock()
	reply := wire.CommAllocReply{DeviceCtx: rank.DeviceCtx, WindowBase: rank.WindowBase, WindowSize: rank.WindowSize}
	if win, err := c.chip.Bytes(rank.WindowBase, rank.WindowSize); err == nil && len(win) > 0 {
		reply.WindowKey = uint64(race.Key(race.Addr(win)))
	}
	return ok(reply.Encode), nil
}

// globalRank runs one step of a global domain's rank on this chip: the
// window is mapped into the chip here, in the chip's own process, as a
// node in one process maps it into its chip (engine/global/node.go).
func (c *child) globalRank(g *wire.GlobalRankReq) ([]byte, error) {
	key := grankKey{g.DomainID, g.Generation, g.Rank}
	if g.Step == grPrepare {
		return c.globalPrepare(key, g)
	}
	table, err := engine.CommDescriptors(g.Table) // every descriptor decodes before the rank is touched
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	r := c.granks[key]
	if g.Step == grRelease {
		delete(c.granks, key)
	}
	c.mu.Unlock()
	switch {
	case r == nil && (g.Step == grRelease || g.Step == grInvalidate):
		return ok(nil), nil // released already, or never prepared (an ABORT after a failed PREPARE)
	case r == nil:
		return nil, engine.Errorf(engine.KeyError, "global domain %d (generation %d) has no rank %d on this chip", key.id, key.gen, key.rank)
	case g.Step == grImport:
		if err := r.Import(table); err != nil {
			return nil, err
		}
		reply := wire.AddrReply{Addr: r.DeviceCtx()}
		return ok(reply.Encode), nil
	case g.Step == grCommit:
		return ok(nil), r.Commit()
	case g.Step == grInvalidate:
		r.Invalidate()
		return ok(nil), nil
	}
	return ok(nil), r.Release()
}

// globalPrepare makes the rank's window. Its names must stay under the
// parent's prefix, so that the parent's leak check and its cleanup of a
// dead child's names (comm.RemoveGlobalRank) both cover them.
func (c *child) globalPrepare(key grankKey, g *wire.GlobalRankReq) ([]byte, error) {
	if !strings.HasPrefix(g.Prefix, c.prefix) {
		return nil, engine.Errorf(engine.ValueError, "global domain %d: name prefix %q is not under this child's parent's %q", key.id, g.Prefix, c.prefix)
	}
	c.mu.Lock()
	_, dup := c.granks[key]
	c.mu.Unlock()
	if dup {
		return nil, engine.Errorf(engine.RuntimeError, "global domain %d (generation %d) rank %d is already prepared on this chip", key.id, key.gen, key.rank)
	}
	req := comm.GlobalRequest{Prefix: g.Prefix, DomainID: g.DomainID, Generation: g.Generation, Name: g.Name,
		Ranks: g.Ranks, WindowSize: g.WindowSize, Timeout: g.Timeout}
	r, desc, err := comm.PrepareGlobal(req, g.Rank, c.chip)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.granks[key] = r
	c.mu.Unlock()
	reply := wire.GlobalPrepareReply{Descriptor: engine.WireDescriptor(desc), WindowBase: r.WindowBase()}
	return ok(reply.Encode), nil
}

// attach maps a parent's shared-memory object (once: mappings.acquire)
// and returns its address here, adding the mapping to held, whose uses
// the caller releases when it is done with the memory.
func (c *child) attach(ref hostRef, held *[]*mapping) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.attached.acquire(ref)
	if err != nil {
		return 0, err
	}
	*held = append(*held, m)
	return m.seg.Addr(), nil
}

// release gives back the uses attach counted.
func (c *child) release(held []*mapping) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attached.release(held)
}

// hostBytes is the host side of a copy: n bytes at ref, which the
// request's decoder checked lie inside ref's object.
func (c *child) hostBytes(ref hostRef, n int, held *[]*mapping) ([]byte, error) {
	if !bounds.FitsInt(ref.Off, n, ref.Size) {
		return nil, engine.Errorf(engine.ValueError, "%d bytes at offset %d overrun the %d bytes of %s", n, ref.Off, ref.Size, ref.Name)
	}
	base, err := c.attach(ref, held)
	if err != nil {
		return nil, err
	}
	return hostmem.Resolve(base+uint64(ref.Off), n)
}

// shutdown releases what the child holds; the parent owns the names.
func (c *child) shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, r := range c.ranks {
		r.Release()
		delete(c.ranks, id)
	}
	for key, r := range c.granks { // a parent that went away mid-domain
		r.Release()
		delete(c.granks, key)
	}
	comm.DrainPool() // parked warm ranks are mapped in the chip: before it closes
	if c.chip != nil {
		c.chip.Close()
	}
	if c.node != nil {
		c.node.Close()
	}
	// The resolver's session holds the host memory kernels made here
	// (host_tensor() in a kernel), named under this process: nobody
	// else would remove it. No kernel runs any more.
	if r, ok := c.resolver.(io.Closer); ok {
		r.Close()
	}
	c.attached.closeAll()
}
