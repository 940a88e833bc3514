package engine

import (
	"time"

	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/hal/dtype"
	"simpler/wire"
)

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
	opGlobal // a global-domain command (a wire.Control) for a level-3 node
)

// A reply starts with a status byte: 0 and the result, or 1 and an error
// (its kind and message).
const (
	statusOK      = 0
	statusErr     = 1
	statusTaskErr = 2 // a TaskError: its path, task and callable, then kind and message
)

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

// decodeReply returns the result part of a reply, or its error.
func decodeReply(b []byte) (*wire.Decoder, error) {
	d := wire.NewDecoder(b)
	switch d.U8() {
	case statusOK:
		return d, d.Err()
	case statusErr:
		k, msg := Kind(d.String()), d.String()
		if err := d.Finish(); err != nil {
			return nil, err
		}
		return nil, &Error{Kind: k, Msg: msg}
	case statusTaskErr:
		te := &TaskError{Worker: d.String(), TaskID: d.Int(1 << 40), Callable: d.String()}
		k, msg := Kind(d.String()), d.String()
		if err := d.Finish(); err != nil {
			return nil, err
		}
		te.Err = &Error{Kind: k, Msg: msg}
		return nil, te
	}
	d.Fail("bad reply status")
	return nil, d.Err()
}

// hostRef names host memory by shared-memory object, so a child can map it
// at its own address: the address rewrite between address spaces.
type hostRef struct {
	name string
	size int // the object's size
	off  int
}

// encodeArgs writes a task's args, naming each host tensor by object and
// offset.
func encodeArgs(e *wire.Encoder, a *TaskArgs) error {
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
		seg, off, ok := hostmem.Locate(t.Addr)
		if !ok {
			return Errorf(ValueError, "tensor %d: host address 0x%x is not in shared memory, so a child process cannot see it", i, t.Addr)
		}
		e.String(seg.Name)
		e.Int(len(seg.Mem))
		e.Int(off)
	}
	e.U32(uint32(len(a.Scalars)))
	for _, s := range a.Scalars {
		e.U64(s)
	}
	return nil
}

// maxDims and maxArgs bound what a decoder accepts.
const (
	maxDims = 16
	maxArgs = 4096
)

// decodeArgs reads args, mapping host tensors through attach.
func decodeArgs(d *wire.Decoder, attach func(hostRef) (uint64, error)) (*TaskArgs, error) {
	n := int(d.U32())
	if n > maxArgs {
		d.Fail("%d tensors exceed the bound %d", n, maxArgs)
	}
	a := &TaskArgs{}
	for i := 0; i < n && d.Err() == nil; i++ {
		tag, dt := Tag(d.U8()), dtype.DType(d.U8())
		nd := int(d.U32())
		if nd > maxDims {
			d.Fail("%d dimensions exceed the bound %d", nd, maxDims)
			break
		}
		t := Tensor{DType: dt, Shape: make([]int, nd)}
		for j := range t.Shape {
			t.Shape[j] = d.Int(1 << 40)
		}
		t.ChildMemory = d.Bool()
		if t.ChildMemory {
			t.Addr = d.U64()
		} else {
			ref := hostRef{name: d.String(), size: d.Int(1 << 40), off: d.Int(1 << 40)}
			if d.Err() != nil {
				break
			}
			base, err := attach(ref)
			if err != nil {
				return nil, err
			}
			t.Addr = base + uint64(ref.off)
		}
		a.Tensors = append(a.Tensors, t)
		a.Tags = append(a.Tags, tag)
	}
	ns := int(d.U32())
	if ns > maxArgs {
		d.Fail("%d scalars exceed the bound %d", ns, maxArgs)
	}
	for i := 0; i < ns && d.Err() == nil; i++ {
		a.Scalars = append(a.Scalars, d.U64())
	}
	return a, d.Err()
}

// hostRefOf names the shared memory under b (a host slice), for copies.
func hostRefOf(b []byte) (hostRef, error) {
	if len(b) == 0 {
		return hostRef{}, Errorf(ValueError, "empty copy")
	}
	addr := uint64(uintptrOf(b))
	seg, off, ok := hostmem.Locate(addr)
	if !ok || off+len(b) > len(seg.Mem) {
		return hostRef{}, Errorf(ValueError, "host memory at 0x%x (%d bytes) is not in shared memory, so a child process cannot see it", addr, len(b))
	}
	return hostRef{name: seg.Name, size: len(seg.Mem), off: off}, nil
}

func encodeRef(e *wire.Encoder, r hostRef) {
	e.String(r.name)
	e.Int(r.size)
	e.Int(r.off)
}

func decodeRef(d *wire.Decoder) hostRef {
	return hostRef{name: d.String(), size: d.Int(1 << 40), off: d.Int(1 << 40)}
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

func decodeConfig(d *wire.Decoder) Config {
	c := Config{Level: d.Int(6)}
	name := d.String()
	n := int(d.U32())
	if n > 4096 {
		d.Fail("%d device ids exceed the bound", n)
	}
	for i := 0; i < n && d.Err() == nil; i++ {
		c.DeviceIDs = append(c.DeviceIDs, d.Int(1<<20))
	}
	c.NumSubWorkers = d.Int(1 << 16)
	c.Mode = d.String()
	c.EnableSDMA = d.Bool()
	c.HeapRingSize = d.Int(1 << 40)
	c.TaskWindow = d.Int(1 << 30)
	c.StartupTimeout = time.Duration(d.I64())
	c.CommProfile = d.String()
	n = d.Count(4096, 1)
	for i := 0; i < n && d.Err() == nil; i++ {
		c.GlobalDeviceRanks = append(c.GlobalDeviceRanks, d.Int(wire.MaxDeviceID))
	}
	if p, err := hal.Lookup(name); err == nil {
		c.Platform = p
	} else if d.Err() == nil {
		d.Fail("%v", err)
	}
	return c
}
