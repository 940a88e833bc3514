package engine

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/hal/comm"
	"simpler/hal/shm"
	"simpler/internal/futex"
	"simpler/wire"
)

// Resolver finds registered callables in a child process: the binding
// loads the module bundle the parent started with and checks the digest.
type Resolver interface {
	Resolve(digest, module, name string) (Callable, error)
}

// Locatable is a callable that can say where a child finds it: the module
// (relative to the bundle) and the top-level name.
type Locatable interface {
	Callable
	Module() string
}

// Child roles.
const (
	roleChip uint8 = 1
	roleSub  uint8 = 2
	roleNode uint8 = 3 // a level-3 worker with its own chips and SUB workers
)

// child is the state of a chip or SUB worker process.
type child struct {
	mb       *mailbox
	role     uint8
	workerID int
	chip     hal.Chip
	node     *Worker // roleNode
	resolver Resolver
	prefix   string // the parent's shm prefix, for domain names
	ppid     int

	mu        sync.Mutex
	callables map[string]Callable // by digest
	attached  map[string]*shm.Segment
	ranks     map[uint64]*comm.Rank // by allocation id
	local     any                   // the task lane's binding state
	chipCtx   ChipCtx
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
// or goes away; it is the whole life of a child process. newResolver turns
// the parent's bundle into a Resolver.
func RunChild(name string, newResolver func(bundle []byte) (Resolver, error)) error {
	shm.SweepDead() // names under this pid left by an earlier process would collide
	mb, err := openMailbox(name)
	if err != nil {
		return err
	}
	defer mb.seg.Close()
	c := &child{mb: mb, ppid: os.Getppid(), callables: map[string]Callable{}, attached: map[string]*shm.Segment{},
		ranks: map[uint64]*comm.Rank{}, done: make(chan struct{})}
	ctl := mb.lanes[laneControl]
	req := ctl.next(c.parentGone)
	if req == nil {
		return nil
	}
	if err := c.init(req, newResolver); err != nil {
		ctl.reply(encodeError(err)) // the parent reports it
		c.shutdown()
		return nil
	}
	ctl.reply([]byte{statusOK})
	go c.watchParent()
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

// watchParent ends a child whose parent died while a kernel runs (the
// lanes notice an absent parent only between requests): after a grace
// period it removes its own shared memory and exits.
func (c *child) watchParent() {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for range tick.C {
		if os.Getppid() != c.ppid {
			c.stop()
			time.AfterFunc(sessionGrace, func() {
				shm.RemoveOwn()
				os.Exit(1)
			})
			return
		}
		select {
		case <-c.done: // shut down by the parent: nothing to watch
			return
		default:
		}
	}
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

func (c *child) init(req []byte, newResolver func([]byte) (Resolver, error)) error {
	d := wire.NewDecoder(req)
	if op := d.U8(); op != opInit {
		return Errorf(RuntimeError, "child: first message is op %d, want init", op)
	}
	c.role = d.U8()
	c.workerID = d.Int(1 << 20)
	c.prefix = d.String()
	l := &Launcher{Path: d.String()}
	nargs := int(d.U32())
	for i := 0; i < nargs && i < 64 && d.Err() == nil; i++ {
		l.Args = append(l.Args, d.String())
	}
	l.Bundle = d.Blob(wire.MaxString * 64)
	var err error
	switch c.role {
	case roleChip, roleSub:
		platform, device := d.String(), int(d.I64())
		if err := d.Finish(); err != nil {
			return err
		}
		if c.role == roleChip {
			if c.chip, err = openChip(platform, device); err != nil {
				return err
			}
		}
	case roleNode:
		cfg := decodeConfig(d)
		if err := d.Finish(); err != nil {
			return err
		}
		cfg.Launcher = l
		if c.node, err = NewWorker(cfg); err != nil {
			return err
		}
		if err := c.node.Init(); err != nil { // the whole subtree is up before the reply
			c.node.Close()
			c.node = nil
			return err
		}
	default:
		return Errorf(RuntimeError, "child: unknown role %d", c.role)
	}
	c.resolver, err = newResolver(l.Bundle)
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
func (c *child) serve(l *lane, handle func(op uint8, d *wire.Decoder) ([]byte, error)) {
	for {
		req := l.next(c.parentGone)
		if req == nil {
			return
		}
		c.fence.Load()
		d := wire.NewDecoder(req)
		op := d.U8()
		resp, err := handle(op, d)
		c.fence.Add(1)
		if err == nil {
			err = d.Finish()
		}
		if err != nil {
			resp = encodeError(err)
		}
		l.reply(resp)
		if op == opShutdown {
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

// task runs kernels and SUB callables.
func (c *child) task(op uint8, d *wire.Decoder) ([]byte, error) {
	digest := d.String()
	args, err := decodeArgs(d, c.attach)
	if err != nil {
		return nil, err
	}
	cfg := decodeCallConfig(d)
	if err := d.Finish(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	fn := c.callables[digest]
	c.mu.Unlock()
	if fn == nil {
		return nil, Errorf(RuntimeError, "callable %s is not registered in this child", digest)
	}
	switch {
	case op == opRunChip && c.role == roleChip:
		k, isKernel := fn.(ChipKernel)
		if !isKernel {
			return nil, Errorf(TypeError, "%q cannot run as a chip kernel", fn.Name())
		}
		c.chipCtx = ChipCtx{WorkerID: c.workerID, Chip: c.chip, Local: &c.local}
		err = runKernel(&c.chipCtx, k, args)
	case op == opRunOrch && c.role == roleNode:
		oc, isOrch := fn.(OrchCallable)
		if !isOrch {
			return nil, Errorf(TypeError, "%q cannot run as an orchestration function", fn.Name())
		}
		_, err = c.node.Run(func(o *Orchestrator) (any, error) { return nil, oc.RunOrch(o, args, &cfg) })
	case op == opRunSub && c.role == roleSub:
		s, isSub := fn.(SubCallable)
		if !isSub {
			return nil, Errorf(TypeError, "%q cannot run as a SUB callable", fn.Name())
		}
		err = s.RunSub(&SubCtx{WorkerID: c.workerID, Local: &c.local}, args)
	default:
		return nil, Errorf(RuntimeError, "task op %d does not fit a child of role %d", op, c.role)
	}
	if err != nil {
		return nil, err
	}
	return ok(nil), nil
}

// control answers registration, memory and domain requests.
func (c *child) control(op uint8, d *wire.Decoder) ([]byte, error) {
	if op == opRegister {
		digest, module, name := d.String(), d.String(), d.String()
		fn, err := c.resolver.Resolve(digest, module, name)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.callables[digest] = fn
		c.mu.Unlock()
		if c.node != nil { // registration flows down the node's own tree
			if _, err := c.node.Register(fn, nil); err != nil {
				return nil, err
			}
		}
		return ok(nil), nil
	}
	if op == opShutdown {
		return ok(nil), nil
	}
	if op == opGlobal {
		if c.node == nil {
			return nil, Errorf(RuntimeError, "a global-domain command needs a level-3 node; this child is a chip or SUB worker")
		}
		ctl, err := wire.DecodeControl(d.Raw(d.Remaining()))
		if err != nil {
			return nil, Errorf(ValueError, "global-domain command: %v", err)
		}
		r := wire.ControlReply{Seq: 1, Cmd: ctl.Cmd} // the mailbox has no sequence; the codec wants one
		if err := c.node.globalCommand(ctl, &r); err != nil {
			return nil, err
		}
		return ok(func(e *wire.Encoder) { r.Encode(e) }), nil
	}
	if c.chip == nil {
		return nil, Errorf(RuntimeError, "op %d needs a chip; this is a SUB worker", op)
	}
	switch op {
	case opMalloc:
		p, err := c.chip.Malloc(d.Int(1 << 40))
		return ok(func(e *wire.Encoder) { e.U64(p) }), err
	case opFree:
		return ok(nil), c.chip.Free(d.U64())
	case opCheck:
		_, err := c.chip.Bytes(d.U64(), d.Int(1<<40))
		return ok(nil), err
	case opCopyIn, opCopyOut:
		dev, ref, n := d.U64(), decodeRef(d), d.Int(1<<40)
		host, err := c.hostBytes(ref, n)
		if err != nil {
			return nil, err
		}
		if op == opCopyIn {
			return ok(nil), c.chip.CopyIn(dev, host)
		}
		return ok(nil), c.chip.CopyOut(host, dev)
	case opCommAlloc:
		return c.commAlloc(d)
	case opCommRelease:
		id := d.U64()
		c.mu.Lock()
		r := c.ranks[id]
		delete(c.ranks, id)
		c.mu.Unlock()
		if r == nil {
			return nil, Errorf(ValueError, "no domain rank with allocation id %d here", id)
		}
		return ok(nil), r.Release()
	}
	return nil, Errorf(RuntimeError, "unknown control op %d", op)
}

func (c *child) commAlloc(d *wire.Decoder) ([]byte, error) {
	req := comm.Request{Namespace: d.String(), AllocationID: d.U64(), Name: d.String(),
		Ranks: d.Int(1 << 16), WindowSize: d.Int(1 << 40), Timeout: time.Duration(d.I64()), Prefix: c.prefix}
	rank := d.Int(1 << 16)
	if err := d.Finish(); err != nil {
		return nil, err
	}
	r, err := comm.Allocate(req, rank, c.chip)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.ranks[req.AllocationID] = r
	c.mu.Unlock()
	return ok(func(e *wire.Encoder) {
		e.U64(r.DeviceCtx)
		e.U64(r.WindowBase)
		e.Int(r.WindowSize)
	}), nil
}

// attach maps a parent's shared-memory object (once) and returns its
// address here.
func (c *child) attach(ref hostRef) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if seg := c.attached[ref.name]; seg != nil {
		return seg.Addr(), nil
	}
	seg, err := shm.Open(ref.name, ref.size)
	if err != nil {
		return 0, Wrap(err, fmt.Sprintf("mapping host memory %s", ref.name))
	}
	hostmem.Register(seg)
	c.attached[ref.name] = seg
	return seg.Addr(), nil
}

func (c *child) hostBytes(ref hostRef, n int) ([]byte, error) {
	base, err := c.attach(ref)
	if err != nil {
		return nil, err
	}
	return hostmem.Resolve(base+uint64(ref.off), n)
}

// shutdown releases what the child holds; the parent owns the names.
func (c *child) shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, r := range c.ranks {
		r.Release()
		delete(c.ranks, id)
	}
	if c.chip != nil {
		c.chip.Close()
	}
	if c.node != nil {
		c.node.Close()
	}
	comm.DrainPool()
	for name, seg := range c.attached {
		hostmem.Unregister(seg)
		seg.Close()
		delete(c.attached, name)
	}
}
