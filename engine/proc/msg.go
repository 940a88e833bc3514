package proc

import (
	"unsafe"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/internal/bounds"
	"simpler/kind"
	"simpler/wire"
)

// The mailbox between a parent and a child process carries wire's
// messages (wire/mailbox.go); this file converts between them and the
// engine's values. The names for the ops are wire's constants.
const (
	opInit        = wire.OpInit
	opRegister    = wire.OpRegister
	opRunChip     = wire.OpRunChip
	opRunSub      = wire.OpRunSub
	opMalloc      = wire.OpMalloc
	opFree        = wire.OpFree
	opCopyIn      = wire.OpCopyIn
	opCopyOut     = wire.OpCopyOut
	opCheck       = wire.OpCheck
	opCommAlloc   = wire.OpCommAlloc
	opCommRelease = wire.OpCommRelease
	opShutdown    = wire.OpShutdown
	opRunOrch     = wire.OpRunOrch
	opGlobal      = wire.OpGlobal     // a global-domain command (a wire.Control) for a level-3 node
	opGlobalRank  = wire.OpGlobalRank // one step of one global-domain rank, for the chip process hosting it
)

// A reply starts with a status byte: 0 and the result, or 1 and an error
// (its kind and message).
const (
	statusOK      = 0
	statusErr     = 1
	statusTaskErr = 2 // a TaskError: its path, task and callable, then kind and message
	// The same two, then the race log of the member that failed (a blob):
	// what it did before it failed is checked too (--race).
	statusErrLog     = 3
	statusTaskErrLog = 4
)

// loggedError is a failed member's error with its race log. Only the
// task lane carries it, and process.run takes it apart: the engine never
// sees it.
type loggedError struct {
	err error
	log []byte
}

func (e *loggedError) Error() string { return e.err.Error() }

func encodeError(err error) []byte {
	if le, ok := err.(*loggedError); ok {
		b := encodeError(le.err)
		b[0] += statusErrLog - statusErr
		var e wire.Encoder
		e.Raw(b)
		e.Blob(le.log)
		return e.Bytes()
	}
	var e wire.Encoder
	if te, ok := err.(*engine.TaskError); ok {
		e.U8(statusTaskErr)
		e.String(te.Worker)
		e.Int(te.TaskID)
		e.String(te.Callable)
		err = te.Err
	} else {
		e.U8(statusErr)
	}
	// The kind and the message travel apart, so the parent rebuilds a
	// typed Error and never reads a kind out of text.
	e.String(string(engine.KindOf(err)))
	e.String(engine.MessageOf(err))
	return e.Bytes()
}

// decodeReply returns the result part of a reply, or its error. The kind
// must be one encodeError can write back: an unknown one would come back
// as part of the message.
func decodeReply(b []byte) (*wire.Decoder, error) {
	d := wire.NewDecoder(b)
	var te *engine.TaskError
	status := d.U8()
	switch status {
	case statusOK:
		return d, d.Err()
	case statusErr, statusErrLog:
	case statusTaskErr, statusTaskErrLog:
		te = &engine.TaskError{Worker: d.String(), TaskID: d.Int(1 << 40), Callable: d.String()}
	default:
		d.Fail("bad reply status")
		return nil, d.Err()
	}
	k, msg := engine.Kind(d.String()), d.String()
	if d.Err() == nil && !kind.Known(k) {
		d.FailBounds("unknown error kind %q", k)
	}
	var log []byte
	if status >= statusErrLog {
		log = d.Blob(wire.MaxRaceLog)
	}
	if err := d.Finish(); err != nil {
		return nil, err
	}
	var err error = &engine.Error{Kind: k, Msg: msg}
	if te != nil {
		te.Err = err
		err = te
	}
	if status >= statusErrLog {
		return nil, &loggedError{err: err, log: log}
	}
	return nil, err
}

// hostRef names host memory by shared-memory object, so a child can map it
// at its own address: the address rewrite between address spaces.
type hostRef = wire.HostRef

// locateRef names the object under a host address and the address's
// offset in it.
func locateRef(addr uint64) (hostRef, bool) {
	seg, off, ok := hostmem.Locate(addr)
	if !ok {
		return hostRef{}, false
	}
	return hostRef{Name: seg.Name, Size: len(seg.Mem), Off: off}, true
}

// hostRefOf names the shared memory under b (a host slice), for copies.
func hostRefOf(b []byte) (hostRef, error) {
	if len(b) == 0 {
		return hostRef{}, engine.Errorf(engine.ValueError, "empty copy")
	}
	addr := uint64(uintptr(unsafe.Pointer(&b[0])))
	ref, ok := locateRef(addr)
	if !ok || !bounds.FitsInt(ref.Off, len(b), ref.Size) {
		return hostRef{}, engine.Errorf(engine.ValueError, "host memory at 0x%x (%d bytes) is not in shared memory, so a child process cannot see it", addr, len(b))
	}
	return ref, nil
}

// mailboxTask is the request that runs one task member in a child: each
// host tensor named by object and offset (locate: locateRef, or a test's
// fake), each device tensor by its address in the child's chip. The
// shapes and scalars are shared with a, not copied: the request is
// encoded before a can change.
func mailboxTask(op uint8, digest string, a *engine.TaskArgs, cfg engine.CallConfig, locate func(uint64) (hostRef, bool)) (*wire.MailboxTask, error) {
	m := &wire.MailboxTask{Op: op, Digest: digest, Config: cfg.Wire(), Scalars: a.Scalars}
	if len(a.Tensors) > 0 {
		m.Tensors = make([]wire.MailboxTensor, len(a.Tensors))
	}
	for i, t := range a.Tensors {
		x := &m.Tensors[i]
		x.Tag, x.DType, x.Shape, x.Strides = a.Tags[i], t.DType, t.Shape, t.Strides
		if t.ChildMemory {
			x.Device, x.Addr = true, t.Addr
			continue
		}
		ref, ok := locate(t.Addr)
		if !ok {
			return nil, engine.Errorf(engine.ValueError, "tensor %d: host address 0x%x is not in shared memory, so a child process cannot see it", i, t.Addr)
		}
		x.Host = ref
	}
	return m, nil
}

// taskArgs are the args of a task request, each host tensor's object
// mapped through attach, which returns the object's address here.
func taskArgs(m *wire.MailboxTask, attach func(hostRef) (uint64, error)) (*engine.TaskArgs, error) {
	a := &engine.TaskArgs{Scalars: m.Scalars}
	if n := len(m.Tensors); n > 0 {
		a.Tensors, a.Tags = make([]engine.Tensor, 0, n), make([]engine.Tag, 0, n)
	}
	for _, x := range m.Tensors {
		t := engine.Tensor{Addr: x.Addr, Shape: x.Shape, Strides: x.Strides, DType: x.DType, ChildMemory: x.Device}
		if !x.Device {
			base, err := attach(x.Host)
			if err != nil {
				return nil, err
			}
			t.Addr = base + uint64(x.Host.Off) // inside the object: attach mapped its Size bytes
		}
		a.Tensors = append(a.Tensors, t)
		a.Tags = append(a.Tags, x.Tag)
	}
	return a, nil
}

// nodeConfig is what a node process needs of c to build its level-3
// worker.
func nodeConfig(c engine.Config) wire.NodeConfig {
	return wire.NodeConfig{Level: c.Level, Platform: c.Platform.Name(), DeviceIDs: c.DeviceIDs, NumSubWorkers: c.NumSubWorkers,
		Mode: c.Mode, EnableSDMA: c.EnableSDMA, HeapRingSize: c.HeapRingSize, TaskWindow: c.TaskWindow,
		StartupTimeout: c.StartupTimeout, CommProfile: c.CommProfile, GlobalDeviceRanks: c.GlobalDeviceRanks,
		ControlTimeout: c.ControlTimeout, TaskTimeout: c.TaskTimeout, HealthTimeout: c.HealthTimeout, CloseTimeout: c.CloseTimeout,
		OrderHazards: c.OrderHazards, Race: c.Race != nil}
}

// configOf is the Config a node process builds its worker from. The
// platform must be named as nodeConfig names it (Platform.Name), not by
// an alias hal.Lookup also takes, which would not re-encode to the same
// bytes.
func configOf(n wire.NodeConfig) (engine.Config, error) {
	p, err := hal.Lookup(n.Platform)
	if err != nil {
		return engine.Config{}, err
	}
	if p.Name() != n.Platform {
		return engine.Config{}, engine.Errorf(engine.ValueError, "platform %q is named %q", n.Platform, p.Name())
	}
	return engine.Config{Level: n.Level, Platform: p, DeviceIDs: n.DeviceIDs, NumSubWorkers: n.NumSubWorkers,
		Mode: n.Mode, EnableSDMA: n.EnableSDMA, HeapRingSize: n.HeapRingSize, TaskWindow: n.TaskWindow,
		StartupTimeout: n.StartupTimeout, CommProfile: n.CommProfile, GlobalDeviceRanks: n.GlobalDeviceRanks,
		ControlTimeout: n.ControlTimeout, TaskTimeout: n.TaskTimeout, HealthTimeout: n.HealthTimeout, CloseTimeout: n.CloseTimeout,
		OrderHazards: n.OrderHazards, Race: raceDetector(n), Served: true}, nil
}
