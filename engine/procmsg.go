package engine

import (
	"slices"
	"time"

	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/hal/comm"
	"simpler/hal/dtype"
	"simpler/internal/bounds"
	"simpler/wire"
)

// The byte forms of the mailbox between a parent and a child process.
// Like the wire formats, every decoder here is canonical: it accepts
// exactly what its encoder writes for some value (so whatever decodes
// re-encodes to the same bytes), refuses trailing bytes, and checks a
// count against the bytes left before it allocates for it.

// Mailbox operations between a parent and a child process.
const (
	opInit uint8 = iota + 1
	opRegister
	opRunChip
	opRunSub
	opMalloc
	opFree
	opCopyIn
	opCopyOut
	opCheck
	opCommAlloc
	opCommRelease
	opShutdown
	opRunOrch
	opGlobal     // a global-domain command (a wire.Control) for a level-3 node
	opGlobalRank // one step of one global-domain rank, for the chip process hosting it
)

// A reply starts with a status byte: 0 and the result, or 1 and an error
// (its kind and message).
const (
	statusOK      = 0
	statusErr     = 1
	statusTaskErr = 2 // a TaskError: its path, task and callable, then kind and message
)

// maxBytes bounds a size or an offset in a request: no host object or
// device allocation is larger.
const maxBytes = 1 << 40

func encodeError(err error) []byte {
	var e wire.Encoder
	if te, ok := err.(*TaskError); ok {
		e.U8(statusTaskErr)
		e.String(te.Worker)
		e.Int(te.TaskID)
		e.String(te.Callable)
		err = te.Err
	} else {
		e.U8(statusErr)
	}
	k := KindOf(err)
	_, msg, _ := SplitKind(err.Error())
	e.String(string(k))
	e.String(msg)
	return e.Bytes()
}

// decodeReply returns the result part of a reply, or its error. The kind
// must be one encodeError can write back: an unknown one would come back
// as part of the message.
func decodeReply(b []byte) (*wire.Decoder, error) {
	d := wire.NewDecoder(b)
	var te *TaskError
	switch d.U8() {
	case statusOK:
		return d, d.Err()
	case statusErr:
	case statusTaskErr:
		te = &TaskError{Worker: d.String(), TaskID: d.Int(1 << 40), Callable: d.String()}
	default:
		d.Fail("bad reply status")
		return nil, d.Err()
	}
	k, msg := Kind(d.String()), d.String()
	if d.Err() == nil && !slices.Contains(kinds, k) {
		d.FailBounds("unknown error kind %q", k)
	}
	if err := d.Finish(); err != nil {
		return nil, err
	}
	if te == nil {
		return nil, &Error{Kind: k, Msg: msg}
	}
	te.Err = &Error{Kind: k, Msg: msg}
	return nil, te
}

// hostRef names host memory by shared-memory object, so a child can map it
// at its own address: the address rewrite between address spaces.
type hostRef struct {
	name string
	size int // the object's size
	off  int
}

// locateRef names the object under a host address and the address's
// offset in it.
func locateRef(addr uint64) (hostRef, bool) {
	seg, off, ok := hostmem.Locate(addr)
	if !ok {
		return hostRef{}, false
	}
	return hostRef{name: seg.Name, size: len(seg.Mem), off: off}, true
}

// hostRefOf names the shared memory under b (a host slice), for copies.
func hostRefOf(b []byte) (hostRef, error) {
	if len(b) == 0 {
		return hostRef{}, Errorf(ValueError, "empty copy")
	}
	addr := uint64(uintptrOf(b))
	ref, ok := locateRef(addr)
	if !ok || !bounds.FitsInt(ref.off, len(b), ref.size) {
		return hostRef{}, Errorf(ValueError, "host memory at 0x%x (%d bytes) is not in shared memory, so a child process cannot see it", addr, len(b))
	}
	return ref, nil
}

func encodeRef(e *wire.Encoder, r hostRef) {
	e.String(r.name)
	e.Int(r.size)
	e.Int(r.off)
}

// decodeRef reads a hostRef as locateRef makes them: a named object and an
// offset inside it (so the object has at least a byte).
func decodeRef(d *wire.Decoder) hostRef {
	r := hostRef{name: d.String(), size: d.Int(maxBytes), off: d.Int(maxBytes)}
	if d.Err() == nil && (r.name == "" || r.off >= r.size) {
		d.FailBounds("host memory %q: offset %d is not inside its %d bytes", r.name, r.off, r.size)
	}
	return r
}

// encodeArgs writes a task's args, naming each host tensor by object and
// offset.
func encodeArgs(e *wire.Encoder, a *TaskArgs) error { return encodeArgsWith(e, a, locateRef) }

// encodeArgsWith is encodeArgs with the lookup of host addresses given, so
// a test can re-encode what decodeArgs made with a fake attach.
func encodeArgsWith(e *wire.Encoder, a *TaskArgs, locate func(uint64) (hostRef, bool)) error {
	e.U32(uint32(len(a.Tensors)))
	for i, t := range a.Tensors {
		e.U8(uint8(a.Tags[i]))
		e.U8(uint8(t.DType))
		e.U32(uint32(len(t.Shape)))
		for _, d := range t.Shape {
			e.Int(d)
		}
		e.Bool(t.ChildMemory)
		if t.ChildMemory {
			e.U64(t.Addr)
			continue
		}
		ref, ok := locate(t.Addr)
		if !ok {
			return Errorf(ValueError, "tensor %d: host address 0x%x is not in shared memory, so a child process cannot see it", i, t.Addr)
		}
		encodeRef(e, ref)
	}
	e.U32(uint32(len(a.Scalars)))
	for _, s := range a.Scalars {
		e.U64(s)
	}
	return nil
}

// maxDims and maxArgs bound what a decoder accepts; minTensor is the
// fewest bytes a tensor takes (a device tensor of no dimensions).
const (
	maxDims   = 16
	maxArgs   = 4096
	minTensor = 1 + 1 + 4 + 1 + 8
)

// decodeArgs reads args, mapping host tensors through attach, which
// returns the address here of the object a hostRef names.
func decodeArgs(d *wire.Decoder, attach func(hostRef) (uint64, error)) (*TaskArgs, error) {
	n := d.Count(maxArgs, minTensor)
	a := &TaskArgs{}
	for i := 0; i < n && d.Err() == nil; i++ {
		t, tag, ref := decodeTensor(d, i)
		if d.Err() != nil {
			break
		}
		if !t.ChildMemory {
			base, err := attach(ref)
			if err != nil {
				return nil, err
			}
			t.Addr = base + uint64(ref.off) // inside the object: attach mapped ref.size bytes
		}
		a.Tensors = append(a.Tensors, t)
		a.Tags = append(a.Tags, tag)
	}
	if ns := d.Count(maxArgs, 8); ns > 0 {
		a.Scalars = make([]uint64, ns)
		for i := range a.Scalars {
			a.Scalars[i] = d.U64()
		}
	}
	return a, d.Err()
}

// decodeTensor reads one tensor of a task: a known tag and dtype, a shape
// whose bytes do not overflow, and for a host tensor the object it lies in
// (ref), which must hold all of its bytes.
func decodeTensor(d *wire.Decoder, i int) (t Tensor, tag Tag, ref hostRef) {
	tag, t.DType = Tag(d.U8()), dtype.DType(d.U8())
	if d.Err() == nil && int(tag) >= len(tagNames) {
		d.FailBounds("tensor %d: unknown tag %d", i, uint8(tag))
	}
	if d.Err() == nil && t.DType.Size() == 0 {
		d.FailBounds("tensor %d: unknown dtype %d", i, uint8(t.DType))
	}
	t.Shape = make([]int, d.Count(maxDims, 8))
	for j := range t.Shape {
		t.Shape[j] = d.Int(maxBytes)
	}
	nbytes, ok := tensorBytes(t)
	if d.Err() == nil && !ok {
		d.FailBounds("tensor %d: shape %v of %s exceeds %d bytes", i, t.Shape, t.DType, maxBytes)
	}
	t.ChildMemory = d.Bool()
	if t.ChildMemory {
		t.Addr = d.U64()
		return t, tag, ref
	}
	ref = decodeRef(d)
	if d.Err() == nil && !bounds.FitsInt(ref.off, nbytes, ref.size) {
		d.FailBounds("tensor %d: %d bytes at offset %d overrun the %d bytes of %s", i, nbytes, ref.off, ref.size, ref.name)
	}
	return t, tag, ref
}

func encodeCallConfig(e *wire.Encoder, c *CallConfig) {
	if c == nil {
		c = &DefaultCallConfig
	}
	e.Int(c.BlockDim)
	e.Int(c.AicpuThreadNum)
	e.Bool(c.EnableProfiling)
}

func decodeCallConfig(d *wire.Decoder) CallConfig {
	return CallConfig{BlockDim: d.Int(1 << 20), AicpuThreadNum: d.Int(1 << 20), EnableProfiling: d.Bool()}
}

// encodeConfig describes a level-3 worker for a node process to build.
func encodeConfig(e *wire.Encoder, c Config) {
	e.Int(c.Level)
	e.String(c.Platform.Name())
	e.U32(uint32(len(c.DeviceIDs)))
	for _, id := range c.DeviceIDs {
		e.Int(id)
	}
	e.Int(c.NumSubWorkers)
	e.String(c.Mode)
	e.Bool(c.EnableSDMA)
	e.Int(c.HeapRingSize)
	e.Int(c.TaskWindow)
	e.I64(int64(c.StartupTimeout))
	e.String(c.CommProfile)
	e.U32(uint32(len(c.GlobalDeviceRanks)))
	for _, r := range c.GlobalDeviceRanks {
		e.Int(r)
	}
}

// decodeConfig reads what encodeConfig writes. The platform must be named
// as encodeConfig names it (Platform.Name), not by an alias hal.Lookup
// also takes, which would not re-encode to the same bytes.
func decodeConfig(d *wire.Decoder) Config {
	c := Config{Level: d.Int(6)}
	name := d.String()
	if n := d.Count(wire.MaxDevices, 8); n > 0 {
		c.DeviceIDs = make([]int, n)
		for i := range c.DeviceIDs {
			c.DeviceIDs[i] = d.Int(1 << 20)
		}
	}
	c.NumSubWorkers = d.Int(1 << 16)
	c.Mode = d.String()
	c.EnableSDMA = d.Bool()
	c.HeapRingSize = d.Int(1 << 40)
	c.TaskWindow = d.Int(1 << 30)
	c.StartupTimeout = time.Duration(d.I64())
	c.CommProfile = d.String()
	if n := d.Count(wire.MaxDevices, 8); n > 0 {
		c.GlobalDeviceRanks = make([]int, n)
		for i := range c.GlobalDeviceRanks {
			c.GlobalDeviceRanks[i] = d.Int(wire.MaxDeviceID)
		}
	}
	if d.Err() != nil {
		return c
	}
	if p, err := hal.Lookup(name); err != nil {
		d.Fail("%v", err)
	} else if p.Name() != name {
		d.FailBounds("platform %q is named %q", name, p.Name())
	} else {
		c.Platform = p
	}
	return c
}

// initMsg is a child's first request: its role and what it needs to take
// it up. The parent writes the common part (encodeInitHead), then the
// role's own: platform and device for a chip or SUB worker, a Config for a
// level-3 node.
type initMsg struct {
	role     uint8
	workerID int
	prefix   string // the parent's shm prefix
	launcher Launcher
	platform string // roleChip, roleSub
	device   int    // roleChip, roleSub (-1 for SUB)
	cfg      Config // roleNode
}

// maxLauncherArgs bounds the arguments a child passes on to its own
// children.
const maxLauncherArgs = 64

func encodeInitHead(e *wire.Encoder, role uint8, worker int, prefix string, l *Launcher) {
	e.U8(opInit)
	e.U8(role)
	e.Int(worker)
	e.String(prefix)
	e.String(l.Path)
	e.U32(uint32(len(l.Args)))
	for _, a := range l.Args {
		e.String(a)
	}
	e.Blob(l.Bundle)
}

// encodeInit writes a whole init message, as startProc and the role bodies
// of startProcs and startNodes do.
func encodeInit(e *wire.Encoder, m *initMsg) {
	encodeInitHead(e, m.role, m.workerID, m.prefix, &m.launcher)
	if m.role == roleNode {
		encodeConfig(e, m.cfg)
		return
	}
	e.String(m.platform)
	e.I64(int64(m.device))
}

// decodeInit reads an init message, all of it, before the child acts on
// any of it.
func decodeInit(b []byte) (*initMsg, error) {
	d := wire.NewDecoder(b)
	if op := d.U8(); op != opInit {
		return nil, Errorf(RuntimeError, "child: first message is op %d, want init", op)
	}
	m := &initMsg{role: d.U8(), workerID: d.Int(1 << 20), prefix: d.String()}
	m.launcher.Path = d.String()
	if n := d.Count(maxLauncherArgs, 4); n > 0 {
		m.launcher.Args = make([]string, n)
		for i := range m.launcher.Args {
			m.launcher.Args[i] = d.String()
		}
	}
	m.launcher.Bundle = d.Blob(wire.MaxString * 64)
	switch m.role {
	case roleChip, roleSub:
		m.platform, m.device = d.String(), int(d.I64())
	case roleNode:
		m.cfg = decodeConfig(d)
	default:
		if d.Err() == nil {
			return nil, Errorf(RuntimeError, "child: unknown role %d", m.role)
		}
	}
	if err := d.Finish(); err != nil {
		return nil, err
	}
	return m, nil
}

// ctlReq is one control-lane request. The child decodes the whole of it,
// trailing bytes included, before acting on it: a malformed malloc must
// not leave an allocation behind.
type ctlReq struct {
	op                   uint8
	digest, module, name string        // opRegister
	ptr                  uint64        // opFree, opCheck, copies: a device address; opCommRelease: an allocation id
	size                 int           // opMalloc, opCheck, copies: bytes
	ref                  hostRef       // copies: the host side
	comm                 comm.Request  // opCommAlloc (the child adds its Prefix)
	rank                 int           // opCommAlloc
	global               wire.Control  // opGlobal
	grank                globalRankReq // opGlobalRank
}

func (r *ctlReq) encode(e *wire.Encoder) {
	e.U8(r.op)
	switch r.op {
	case opRegister:
		e.String(r.digest)
		e.String(r.module)
		e.String(r.name)
	case opMalloc:
		e.Int(r.size)
	case opFree, opCommRelease:
		e.U64(r.ptr)
	case opCheck:
		e.U64(r.ptr)
		e.Int(r.size)
	case opCopyIn, opCopyOut:
		e.U64(r.ptr)
		encodeRef(e, r.ref)
		e.Int(r.size)
	case opCommAlloc:
		e.String(r.comm.Namespace)
		e.U64(r.comm.AllocationID)
		e.String(r.comm.Name)
		e.Int(r.comm.Ranks)
		e.Int(r.comm.WindowSize)
		e.I64(int64(r.comm.Timeout))
		e.Int(r.rank)
	case opGlobal:
		r.global.Encode(e)
	case opGlobalRank:
		r.grank.encode(e)
	}
}

// decodeCtl reads the rest of a control request whose op byte d has just
// read, and checks that nothing trails it.
func decodeCtl(op uint8, d *wire.Decoder) (ctlReq, error) {
	r := ctlReq{op: op}
	switch op {
	case opShutdown:
	case opRegister:
		r.digest, r.module, r.name = d.String(), d.String(), d.String()
	case opMalloc:
		r.size = d.Int(maxBytes)
	case opFree, opCommRelease:
		r.ptr = d.U64()
	case opCheck:
		r.ptr, r.size = d.U64(), d.Int(maxBytes)
	case opCopyIn, opCopyOut:
		r.ptr, r.ref, r.size = d.U64(), decodeRef(d), d.Int(maxBytes)
		if d.Err() == nil && (r.size == 0 || !bounds.FitsInt(r.ref.off, r.size, r.ref.size)) {
			d.FailBounds("a copy of %d bytes at offset %d of the %d bytes of %s", r.size, r.ref.off, r.ref.size, r.ref.name)
		}
	case opCommAlloc:
		r.comm = comm.Request{Namespace: d.String(), AllocationID: d.U64(), Name: d.String(),
			Ranks: d.Int(1 << 16), WindowSize: d.Int(maxBytes), Timeout: time.Duration(d.I64())}
		r.rank = d.Int(1 << 16)
	case opGlobal:
		c, err := wire.DecodeControl(d.Raw(d.Remaining())) // a copy: the mailbox is reused
		if err != nil {
			return r, Errorf(ValueError, "global-domain command: %v", err)
		}
		r.global = c
	case opGlobalRank:
		r.grank = decodeGlobalRankReq(d)
	default:
		return r, Errorf(RuntimeError, "unknown control op %d", op)
	}
	return r, d.Finish()
}

// decodeCtlReq is decodeCtl of a whole request, op byte included.
func decodeCtlReq(b []byte) (ctlReq, error) {
	d := wire.NewDecoder(b)
	op := d.U8()
	if err := d.Err(); err != nil {
		return ctlReq{}, err
	}
	return decodeCtl(op, d)
}

// The steps of opGlobalRank: a level-3 node whose chips are processes
// runs each rank's part of a global domain (hal/comm's GlobalRank) in the
// process of the rank's chip, where the chip's memory is.
const (
	grPrepare    uint8 = iota + 1 // → descriptor, window base
	grImport                      // the table → device ctx
	grCommit                      // → ()
	grInvalidate                  // → ()
	grRelease                     // → (); an unknown rank is already released
)

// globalRankReq is one opGlobalRank step. Every step names the rank by
// domain id, generation and rank; PREPARE carries the rest of the request
// (the node chooses the name prefix), IMPORT the rank-ordered table.
type globalRankReq struct {
	step  uint8
	req   comm.GlobalRequest
	rank  int
	table []comm.Descriptor
}

func (g *globalRankReq) encode(e *wire.Encoder) {
	e.U8(g.step)
	e.U64(g.req.DomainID)
	e.U64(g.req.Generation)
	e.Int(g.rank)
	switch g.step {
	case grPrepare:
		e.String(g.req.Prefix)
		e.String(g.req.Name)
		e.Int(g.req.Ranks)
		e.Int(g.req.WindowSize)
		e.I64(int64(g.req.Timeout))
	case grImport:
		e.U32(uint32(len(g.table)))
		for _, desc := range g.table {
			e.Raw(comm.EncodeDescriptor(desc))
		}
	}
}

// decodeGlobalRankReq reads what encode writes; a descriptor must decode
// (comm.DecodeDescriptor is canonical), and the table is bounded before
// anything is allocated for it.
func decodeGlobalRankReq(d *wire.Decoder) globalRankReq {
	g := globalRankReq{step: d.U8()}
	g.req.DomainID, g.req.Generation = d.U64(), d.U64()
	g.rank = d.Int(wire.MaxRanks - 1)
	switch g.step {
	case grPrepare:
		g.req.Prefix, g.req.Name = d.String(), d.String()
		g.req.Ranks, g.req.WindowSize = d.Int(wire.MaxRanks), d.Int(maxBytes)
		g.req.Timeout = time.Duration(d.I64())
	case grImport:
		n := d.Count(wire.MaxRanks, comm.DescriptorSize)
		for i := 0; i < n && d.Err() == nil; i++ {
			desc, err := comm.DecodeDescriptor(d.Raw(comm.DescriptorSize))
			if err != nil {
				d.FailBounds("descriptor %d: %v", i, err)
				break
			}
			g.table = append(g.table, desc)
		}
	case grCommit, grInvalidate, grRelease:
	default:
		if d.Err() == nil {
			d.FailBounds("unknown global rank step %d", g.step)
		}
	}
	return g
}

// rankReply is a child's answer to opCommAlloc.
type rankReply struct {
	deviceCtx, windowBase uint64
	windowSize            int
}

func (r rankReply) encode(e *wire.Encoder) {
	e.U64(r.deviceCtx)
	e.U64(r.windowBase)
	e.Int(r.windowSize)
}

func decodeRankReply(d *wire.Decoder) (rankReply, error) {
	r := rankReply{deviceCtx: d.U64(), windowBase: d.U64(), windowSize: d.Int(maxBytes)}
	return r, d.Finish()
}

// taskReq is one task-lane request: a member of a task to run.
type taskReq struct {
	op     uint8
	digest string
	args   *TaskArgs
	cfg    CallConfig
}

// encodeTask writes a task request; locate names host memory (locateRef).
func encodeTask(e *wire.Encoder, r *taskReq, locate func(uint64) (hostRef, bool)) error {
	e.U8(r.op)
	e.String(r.digest)
	if err := encodeArgsWith(e, r.args, locate); err != nil {
		return err
	}
	encodeCallConfig(e, &r.cfg)
	return nil
}

// decodeTask reads the rest of a task request whose op byte d has just
// read, mapping host tensors through attach.
func decodeTask(op uint8, d *wire.Decoder, attach func(hostRef) (uint64, error)) (*taskReq, error) {
	if op != opRunChip && op != opRunSub && op != opRunOrch {
		return nil, Errorf(RuntimeError, "unknown task op %d", op)
	}
	r := &taskReq{op: op, digest: d.String()}
	args, err := decodeArgs(d, attach)
	if err != nil {
		return nil, err
	}
	r.args, r.cfg = args, decodeCallConfig(d)
	if err := d.Finish(); err != nil {
		return nil, err
	}
	return r, nil
}
