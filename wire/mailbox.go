package wire

import (
	"time"

	"simpler/hal/dtype"
)

// The messages of the mailbox between a parent and a child process
// (engine/proc/mailbox.go is the shared memory that carries them). Parent
// and child are the same binary, so these formats carry no version, but
// they keep every convention of this package: canonical, bounded, and
// decoded whole before the child acts on any of it (a malformed malloc
// must not leave an allocation behind).
//
// A request starts with its op byte. The control lane carries a
// MailboxInit first, then MailboxControl requests; the task lane carries
// MailboxTask requests. A reply is a status byte, then the error (the
// process transport's encoding, engine/proc/msg.go) or the op's result:
// AddrReply (OpMalloc, RankImport), CommAllocReply (OpCommAlloc),
// GlobalPrepareReply (RankPrepare), a ControlReply (OpGlobal), or
// nothing.

// The mailbox ops: a request's first byte.
const (
	OpInit        uint8 = iota + 1 // MailboxInit
	OpRegister                     // MailboxControl: Digest, Module, Name
	OpRunChip                      // MailboxTask: a kernel on the child's chip
	OpRunSub                       // MailboxTask: a SUB callable
	OpMalloc                       // MailboxControl: Size → AddrReply
	OpFree                         // MailboxControl: Ptr
	OpCopyIn                       // MailboxControl: Ptr, Host, Size
	OpCopyOut                      // MailboxControl: Ptr, Host, Size
	OpCheck                        // MailboxControl: Ptr, Size
	OpCommAlloc                    // MailboxControl: Comm → CommAllocReply
	OpCommRelease                  // MailboxControl: Ptr, the allocation id
	OpShutdown                     // MailboxControl: nothing
	OpRunOrch                      // MailboxTask: an orchestration function on a level-3 node
	OpGlobal                       // MailboxControl: Global, a global-domain command → ControlReply
	OpGlobalRank                   // MailboxControl: GlobalRank, one step of one rank
	OpCancel                       // MailboxControl: Task, Reason; stop that task if the task lane still runs it
	OpPing                         // MailboxControl: nothing; a health probe
	OpRaceCount                    // MailboxControl: nothing → RaceCount, what a level-3 node's --race detector found
)

// The roles a child takes up (MailboxInit.Role).
const (
	RoleChip uint8 = 1 // a chip worker: Platform, Device
	RoleSub  uint8 = 2 // a SUB worker: Platform, Device -1
	RoleNode uint8 = 3 // a level-3 worker with chips and SUB workers of its own: Node
)

// Bounds of the mailbox messages, beside the protocol's.
const (
	MaxLauncherArgs  = 64                    // arguments a child passes on to its own children
	MaxWorkerID      = 1 << 20               // a child's worker id
	MaxLevel         = 6                     // a node's level
	MaxTaskWindow    = 1 << 30               // a node's task window
	MaxCommRanks     = 1 << 16               // ranks of a communication domain
	minMailboxTensor = minTensorSize + 4 + 8 // a device tensor of no dimensions or strides
)

// HostRef names host memory by the shared-memory object it lies in, so
// that a child maps the object at its own address and the offset carries
// over: the address rewrite between address spaces.
type HostRef struct {
	Name string // the object's name, non-empty
	Size int    // the object's bytes, ≤ MaxBufferBytes
	Off  int    // an offset inside the object: < Size
}

func (r HostRef) encode(e *Encoder) {
	e.String(r.Name)
	e.Int(r.Size)
	e.Int(r.Off)
}

func decodeHostRef(d *Decoder) HostRef {
	r := HostRef{Name: d.StringMax(MaxName), Size: d.Int(MaxBufferBytes), Off: d.Int(MaxBufferBytes)}
	if d.err == nil && (r.Name == "" || r.Off >= r.Size) {
		d.FailBounds("host memory %q: offset %d is not inside its %d bytes", r.Name, r.Off, r.Size)
	}
	return r
}

// holds reports whether n bytes at r lie inside its object. Both fields
// of a decoded ref are at most MaxBufferBytes, so nothing here wraps.
func (r HostRef) holds(n int64) bool { return n >= 0 && n <= int64(r.Size)-int64(r.Off) }

// MailboxTensor is one tensor of a MailboxTask: TASK's tensor head (tag,
// dtype, shape), then its strides (a list, empty for row-major), then its
// location, one of the two places a child can reach: an address in its
// own chip's memory (location 3), or host shared memory by object and
// offset (location 4), whose object must hold every byte the tensor
// reaches.
type MailboxTensor struct {
	Tag     Tag
	DType   dtype.DType
	Shape   []int
	Strides []int   // in elements, one per dimension; nil is row-major
	Device  bool    // the bytes are at Addr in the child's chip, else at Host
	Addr    uint64  // Device
	Host    HostRef // not Device
}

// MailboxTask runs one member of a task in a child. After the op (which
// says the role: OpRunChip, OpRunSub or OpRunOrch) it is TASK's layout,
// with mailbox tensors: the digest, the CallConfig (the same type and
// bounds as TASK's), the tensors and the scalars.
type MailboxTask struct {
	Op      uint8
	Digest  string
	Config  CallConfig
	Tensors []MailboxTensor
	Scalars []uint64
	// RaceTag, if not 0, asks the child to record the member's accesses
	// and synchronisation for the parent's race detector (--race), keying
	// the chip's own memory with this tag (race.ChipTag): the OK reply
	// then carries the log, a blob of at most MaxRaceLog bytes.
	RaceTag uint64
}

// raceTagBits are the bits a RaceTag may have (race.PrivateTag's).
const raceTagBits = 1<<62 | 0x3fff<<48

// MaxRaceLog bounds the access log in a task's reply.
const MaxRaceLog = 1 << 20

// Encode writes the task request.
func (t *MailboxTask) Encode(e *Encoder) {
	e.U8(t.Op)
	e.String(t.Digest)
	t.Config.encode(e)
	e.U32(uint32(len(t.Tensors)))
	for i := range t.Tensors {
		x := &t.Tensors[i]
		encodeTensorHead(e, x.Tag, x.DType, x.Shape)
		e.U32(uint32(len(x.Strides)))
		for _, st := range x.Strides {
			e.Int(st)
		}
		if x.Device {
			e.U8(whereDevice)
			e.U64(x.Addr)
		} else {
			e.U8(whereHost)
			x.Host.encode(e)
		}
	}
	encodeScalars(e, t.Scalars)
	e.U64(t.RaceTag)
}

// DecodeMailboxTask reads a task request.
func DecodeMailboxTask(b []byte) (MailboxTask, error) {
	d := NewDecoder(b)
	t := MailboxTask{Op: d.U8()}
	if d.err == nil && t.Op != OpRunChip && t.Op != OpRunSub && t.Op != OpRunOrch {
		d.FailBounds("unknown task op %d", t.Op)
	}
	t.Digest = decodeDigest(d)
	t.Config = decodeCallConfig(d)
	n := d.Count(MaxTensors, minMailboxTensor)
	if n > 0 {
		t.Tensors = make([]MailboxTensor, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		t.Tensors = append(t.Tensors, decodeMailboxTensor(d, i))
	}
	t.Scalars = decodeScalars(d)
	if t.RaceTag = d.U64(); t.RaceTag&^raceTagBits != 0 {
		d.FailBounds("race tag %#x has bits past its field", t.RaceTag)
	}
	if err := d.Finish(); err != nil {
		return MailboxTask{}, err
	}
	return t, nil
}

func decodeMailboxTensor(d *Decoder, i int) MailboxTensor {
	var x MailboxTensor
	var nbytes int64
	x.Tag, x.DType, x.Shape, nbytes = decodeTensorHead(d, i)
	if d.err != nil {
		return x
	}
	if ns := d.Count(MaxDims, 8); ns > 0 {
		if ns != len(x.Shape) {
			d.FailBounds("tensor %d: %d strides for %d dimensions", i, ns, len(x.Shape))
			return x
		}
		x.Strides = make([]int, ns)
		for j := range x.Strides {
			x.Strides[j] = d.Int(MaxDim)
		}
		if d.err != nil {
			return x
		}
		if nbytes = stridedBytes(x.Shape, x.Strides, x.DType); nbytes < 0 {
			d.FailBounds("tensor %d: shape %v with strides %v of %s reaches more than %d bytes", i, x.Shape, x.Strides, x.DType, int64(MaxBufferBytes))
			return x
		}
	}
	switch where := d.U8(); where {
	case whereDevice:
		x.Device, x.Addr = true, d.U64()
	case whereHost:
		x.Host = decodeHostRef(d)
		if d.err == nil && !x.Host.holds(nbytes) {
			d.FailBounds("tensor %d: %d bytes at offset %d overrun the %d bytes of %s", i, nbytes, x.Host.Off, x.Host.Size, x.Host.Name)
		}
	default:
		if d.err == nil {
			d.FailBounds("tensor %d: unknown location %d (want 3 device or 4 host)", i, where)
		}
	}
	return x
}

// MailboxInit is a child's first request: its role and what it needs to
// take it up. Path and Args say how the child starts children of its own
// (the same binary; Args come before the mailbox name), and Bundle is the
// parent's ChildBundle, for the child's resolver.
type MailboxInit struct {
	Role     uint8
	WorkerID int    // ≤ MaxWorkerID
	Prefix   string // the parent's shared-memory prefix
	Path     string
	Args     []string   // ≤ MaxLauncherArgs
	Bundle   []byte     // ≤ MaxChildBundle
	Platform string     // RoleChip, RoleSub
	Device   int        // RoleChip: the device id; RoleSub: -1
	Node     NodeConfig // RoleNode
}

// Encode writes the init request.
func (m *MailboxInit) Encode(e *Encoder) {
	e.U8(OpInit)
	e.U8(m.Role)
	e.Int(m.WorkerID)
	e.String(m.Prefix)
	e.String(m.Path)
	e.U32(uint32(len(m.Args)))
	for _, a := range m.Args {
		e.String(a)
	}
	e.Blob(m.Bundle)
	if m.Role == RoleNode {
		m.Node.encode(e)
		return
	}
	e.String(m.Platform)
	e.I64(int64(m.Device))
}

// DecodeMailboxInit reads an init request, all of it, before the child
// acts on any of it.
func DecodeMailboxInit(b []byte) (MailboxInit, error) {
	d := NewDecoder(b)
	if op := d.U8(); d.err == nil && op != OpInit {
		d.FailBounds("first message is op %d, want init", op)
	}
	m := MailboxInit{Role: d.U8()}
	if d.err == nil && m.Role != RoleChip && m.Role != RoleSub && m.Role != RoleNode {
		d.FailBounds("unknown role %d", m.Role)
	}
	m.WorkerID = d.Int(MaxWorkerID)
	m.Prefix = d.StringMax(MaxName)
	m.Path = d.StringMax(MaxName)
	if n := d.Count(MaxLauncherArgs, 4); n > 0 {
		m.Args = make([]string, n)
		for i := range m.Args {
			m.Args[i] = d.StringMax(MaxName)
		}
	}
	m.Bundle = d.Blob(MaxChildBundle)
	if m.Role == RoleNode {
		m.Node = decodeNodeConfig(d)
	} else {
		m.Platform = decodePlatform(d)
		m.Device = int(d.I64())
		if d.err == nil && (m.Device < -1 || m.Device > MaxDeviceID) {
			d.FailBounds("device %d: want -1..%d", m.Device, MaxDeviceID)
		}
	}
	if err := d.Finish(); err != nil {
		return MailboxInit{}, err
	}
	return m, nil
}

// decodePlatform reads a platform's name: a non-empty identifier. The
// engine checks that it is the platform's own name, not an alias, which
// would not re-encode to the same bytes.
func decodePlatform(d *Decoder) string {
	p := decodeIdent(d, "platform")
	if d.err == nil && p == "" {
		d.FailBounds("empty platform")
	}
	return p
}

// NodeConfig describes a level-3 worker for a node process to build: the
// engine's Config without what stays in the parent (its launcher, remote
// sessions and shipped sources).
type NodeConfig struct {
	Level             int // ≤ MaxLevel
	Platform          string
	DeviceIDs         []int
	NumSubWorkers     int
	Mode              string
	EnableSDMA        bool
	HeapRingSize      int // ≤ MaxBufferBytes
	TaskWindow        int // ≤ MaxTaskWindow
	StartupTimeout    time.Duration
	CommProfile       string
	GlobalDeviceRanks []int
	// The node's own bounds, as the parent's Worker was given them.
	ControlTimeout, TaskTimeout, HealthTimeout, CloseTimeout time.Duration
	// OrderHazards is the node's Worker(order_hazards=) setting.
	OrderHazards bool
	// Race says the parent runs with --race: the node process checks what
	// runs in it with a detector of its own (OpRaceCount asks its count).
	Race bool
}

func (c *NodeConfig) encode(e *Encoder) {
	e.Int(c.Level)
	e.String(c.Platform)
	encodeInts(e, c.DeviceIDs)
	e.Int(c.NumSubWorkers)
	e.String(c.Mode)
	e.Bool(c.EnableSDMA)
	e.Int(c.HeapRingSize)
	e.Int(c.TaskWindow)
	e.I64(int64(c.StartupTimeout))
	e.String(c.CommProfile)
	encodeInts(e, c.GlobalDeviceRanks)
	for _, t := range []time.Duration{c.ControlTimeout, c.TaskTimeout, c.HealthTimeout, c.CloseTimeout} {
		e.I64(int64(t))
	}
	e.Bool(c.OrderHazards)
	e.Bool(c.Race)
}

func decodeNodeConfig(d *Decoder) NodeConfig {
	var c NodeConfig
	c.Level = d.Int(MaxLevel)
	c.Platform = decodePlatform(d)
	c.DeviceIDs = decodeInts(d, MaxDevices, MaxDeviceID, "device id")
	c.NumSubWorkers = d.Int(MaxSubWorkers)
	c.Mode = decodeIdent(d, "mode")
	c.EnableSDMA = d.Bool()
	c.HeapRingSize = d.Int(MaxBufferBytes)
	c.TaskWindow = d.Int(MaxTaskWindow)
	c.StartupTimeout = time.Duration(d.I64())
	c.CommProfile = decodeIdent(d, "comm profile")
	c.GlobalDeviceRanks = decodeInts(d, MaxDevices, MaxDeviceID, "global device rank")
	for _, t := range []*time.Duration{&c.ControlTimeout, &c.TaskTimeout, &c.HealthTimeout, &c.CloseTimeout} {
		*t = time.Duration(d.I64())
	}
	c.OrderHazards = d.Bool()
	c.Race = d.Bool()
	return c
}

// stridedBytes is how many bytes a strided tensor reaches, from its first
// element to one past its last: 0 with a dimension of 0, -1 past
// MaxBufferBytes. Shape and strides are each at most MaxDim (2^40), so a
// product of one dimension fits an int64; the sum is checked as it grows.
func stridedBytes(shape, strides []int, dt dtype.DType) int64 {
	for _, n := range shape {
		if n == 0 {
			return 0
		}
	}
	last := int64(0)
	for j, n := range shape {
		if strides[j] != 0 && int64(n-1) > MaxBufferBytes/int64(strides[j]) {
			return -1
		}
		last += int64(n-1) * int64(strides[j])
		if last > MaxBufferBytes {
			return -1
		}
	}
	n := (last + 1) * int64(dt.Size())
	if n > MaxBufferBytes {
		return -1
	}
	return n
}
