package proc

import (
	"bytes"
	"errors"
	"fmt"
	"simpler/internal/wiretest"
	"testing"
	"time"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/hal/dtype"
	"simpler/hal/shm"
	"simpler/internal/bounds"
	"simpler/internal/race"
	"simpler/wire"
)

// Fuzz targets for this package's side of the mailbox: its reply status
// and errors (encodeError, decodeReply), the conversions between engine
// values and wire's mailbox messages (msg.go), and the mailbox header. The
// messages themselves are fuzzed in package wire. Each seeds from the
// package's own encoders and checks that decoding never panics and that
// whatever decodes converts back to the same bytes.

// fakeHost stands in for a child's mapped host objects: the i-th name
// seen is "mapped" at (i+1)<<41, further apart than any offset, so every
// address a decode makes maps back to its object and offset. Like the
// child's attach, it refuses a second size for a name.
type fakeHost struct {
	index map[string]int
	refs  []hostRef
}

const fakeSpan = 1 << 41

func newFakeHost() *fakeHost { return &fakeHost{index: map[string]int{}} }

func (h *fakeHost) attach(r hostRef) (uint64, error) {
	i, seen := h.index[r.Name]
	if !seen {
		i = len(h.refs)
		h.index[r.Name] = i
		h.refs = append(h.refs, r)
	}
	if h.refs[i].Size != r.Size {
		return 0, fmt.Errorf("ValueError: %s is mapped with %d bytes, not %d", r.Name, h.refs[i].Size, r.Size)
	}
	return uint64(i+1) * fakeSpan, nil
}

func (h *fakeHost) locate(addr uint64) (hostRef, bool) {
	i := int(addr/fakeSpan) - 1
	if i < 0 || i >= len(h.refs) {
		return hostRef{}, false
	}
	r := h.refs[i]
	r.Off = int(addr % fakeSpan)
	return r, true
}

// sampleArgs are task args of every kind of tensor, with their host
// tensors placed in h.
func sampleArgs(h *fakeHost) []*engine.TaskArgs {
	at := func(name string, size, off int) uint64 {
		base, err := h.attach(hostRef{Name: name, Size: size})
		if err != nil {
			panic(err)
		}
		return base + uint64(off)
	}
	host := engine.Tensor{Addr: at("simpler-1-host-1", 4096, 64), Shape: []int{4, 8}, DType: dtype.Float32}
	dev := engine.Tensor{Addr: 0x1000_0000_0200, Shape: []int{16}, DType: dtype.Int64, ChildMemory: true}
	empty := engine.Tensor{Addr: at("simpler-1-host-2", 64, 63), Shape: []int{0, 1 << 40}, DType: dtype.Float16}
	return []*engine.TaskArgs{
		{},
		{Scalars: []uint64{1, 1 << 63}},
		{Tensors: []engine.Tensor{host, dev, empty}, Tags: []engine.Tag{engine.Input, engine.OutputExisting, engine.NoDep}, Scalars: []uint64{7}},
		{Tensors: []engine.Tensor{host, host}, Tags: []engine.Tag{engine.InOut, engine.Output}},
	}
}

// The canonical-encoding check of the fuzz targets (internal/wiretest).
type decodeFunc = wiretest.DecodeFunc

var (
	fuzzCanonical = wiretest.FuzzCanonical
	canonical     = wiretest.Canonical
)

func FuzzDecodeReply(f *testing.F) {
	for _, err := range []error{
		engine.Errorf(engine.ValueError, "bad"),
		errors.New("TypeError: from a lower layer"),
		errors.New("no kind at all"),
		engine.Wrap(engine.Errorf(engine.KeyError, "inner"), "outer"),
		&engine.TaskError{TaskID: 3, Worker: "chip_worker 1", Callable: "k", Err: engine.Errorf(engine.TimeoutError, "slow")},
		&loggedError{err: engine.Errorf(engine.RuntimeError, "failed"), log: []byte{1, 0, 0}},
	} {
		f.Add(encodeError(err))
	}
	f.Add(ok(nil))
	f.Add(ok(func(e *wire.Encoder) { e.U64(0x1000_0000_0000) }))
	f.Add(ok((&wire.CommAllocReply{DeviceCtx: 1 << 44, WindowBase: 1<<44 + 4096, WindowSize: 4096}).Encode))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeReply(b)
		switch err.(type) {
		case nil:
			if b[0] != statusOK || d.Offset() != 1 {
				t.Fatalf("%x: an OK reply of status %d with its result at %d", b, b[0], d.Offset())
			}
			// The result decoders a parent applies to an OK reply.
			if r, err := wire.DecodeCommAllocReply(d.Rest()); err == nil {
				canonical(t, b[1:], func(e *wire.Encoder) error { r.Encode(e); return nil })
			}
		case *engine.Error, *engine.TaskError, *loggedError:
			canonical(t, b, func(e *wire.Encoder) error { e.Raw(encodeError(err)); return nil })
		}
	})
}

// FuzzTaskArgs: a task request that decodes converts to task args (host
// tensors mapped through a fake attach) and back to the same bytes, so the
// engine's side of the mailbox task loses nothing.
func FuzzTaskArgs(f *testing.F) {
	h := newFakeHost()
	var seeds [][]byte
	for i, a := range sampleArgs(h) {
		op := []uint8{opRunChip, opRunSub, opRunOrch}[i%3]
		m, err := mailboxTask(op, "sha256:00", a, engine.CallConfig{BlockDim: i, AicpuThreadNum: 2}, h.locate)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, wire.Payload(m))
	}
	fuzzCanonical(f, seeds, func(b []byte) (func(*wire.Encoder) error, error) {
		m, err := wire.DecodeMailboxTask(b)
		if err != nil {
			return nil, err
		}
		h := newFakeHost()
		a, err := taskArgs(&m, h.attach)
		if err != nil {
			return nil, err
		}
		if len(a.Tensors) != len(a.Tags) {
			return nil, fmt.Errorf("%d tensors, %d tags", len(a.Tensors), len(a.Tags))
		}
		for i, ten := range a.Tensors {
			if _, ok := bounds.Product(ten.Shape, ten.DType.Size(), wire.MaxBufferBytes); !ok || ten.DType.Size() == 0 || !a.Tags[i].Valid() {
				panic(fmt.Sprintf("tensor %d decoded with shape %v of %s, tag %s", i, ten.Shape, ten.DType, a.Tags[i]))
			}
		}
		return func(e *wire.Encoder) error {
			back, err := mailboxTask(m.Op, m.Digest, a, engine.CallConfigOf(m.Config), h.locate)
			if err == nil {
				back.RaceTag = m.RaceTag
				back.Encode(e)
			}
			return err
		}, nil
	})
}

// FuzzHostRefOf: the ref of any non-empty slice of a registered object
// names that object and the slice's offset, and a copy of the slice is a
// request that decodes to the same ref.
func FuzzHostRefOf(f *testing.F) {
	const size = 4096
	seg := &shm.Segment{Name: "simpler-1-fuzz-1", Mem: make([]byte, size)} // Go memory: nothing to unlink
	hostmem.Register(seg)
	f.Cleanup(func() { hostmem.Unregister(seg) })
	f.Add(uint16(0), uint16(size))
	f.Add(uint16(size-1), uint16(1))
	f.Add(uint16(size), uint16(0))
	f.Fuzz(func(t *testing.T, off, n uint16) {
		o := int(off) % (size + 1)
		k := int(n) % (size - o + 1)
		r, err := hostRefOf(seg.Mem[o : o+k])
		if k == 0 {
			if err == nil {
				t.Fatalf("an empty slice at %d has ref %+v", o, r)
			}
			return
		}
		if err != nil || r != (hostRef{Name: seg.Name, Size: size, Off: o}) {
			t.Fatalf("%d bytes at %d: %+v, %v", k, o, r, err)
		}
		req := wire.MailboxControl{Op: opCopyIn, Ptr: 0x1000_0000_0000, Host: r, Size: k}
		if back, err := wire.DecodeMailboxControl(wire.Payload(&req)); err != nil || back.Host != r {
			t.Fatalf("%+v decodes as %+v (%v)", r, back.Host, err)
		}
	})
}

func sampleConfigs(tb testing.TB) []engine.Config {
	p, err := hal.Lookup("a2a3sim")
	if err != nil {
		tb.Fatal(err)
	}
	return []engine.Config{
		{Level: 3, Platform: p},
		{Level: 3, Platform: p, DeviceIDs: []int{0, 1, 2, 3}, NumSubWorkers: 2, Mode: "process", EnableSDMA: true,
			HeapRingSize: 64 << 20, TaskWindow: 128, StartupTimeout: 30 * time.Second, CommProfile: "sim",
			GlobalDeviceRanks: []int{4, 5, 6, 7}, Race: race.New(nil)},
	}
}

// FuzzNodeInit: a node's init request that decodes gives a Config (its
// platform looked up) that converts back to the same bytes.
func FuzzNodeInit(f *testing.F) {
	var seeds [][]byte
	for _, c := range sampleConfigs(f) {
		seeds = append(seeds, wire.Payload(&wire.MailboxInit{Role: roleNode, WorkerID: 2, Prefix: "simpler-1-", Node: nodeConfig(c)}))
	}
	fuzzCanonical(f, seeds, func(b []byte) (func(*wire.Encoder) error, error) {
		m, err := wire.DecodeMailboxInit(b)
		if err != nil || m.Role != roleNode {
			return nil, fmt.Errorf("not a node's init: %v", err)
		}
		c, err := configOf(m.Node)
		if err != nil {
			return nil, err
		}
		return func(e *wire.Encoder) error {
			m.Node = nodeConfig(c)
			m.Encode(e)
			return nil
		}, nil
	})
}

func FuzzMailboxHeader(f *testing.F) {
	good := make([]byte, mboxHeader)
	writeMailboxHeader(good)
	f.Add(good)
	f.Add(good[:mboxHeader-1])
	f.Fuzz(func(t *testing.T, b []byte) {
		if checkMailboxHeader(b) != nil {
			return
		}
		want := make([]byte, mboxHeader)
		writeMailboxHeader(want)
		if len(b) < mboxHeader || !bytes.Equal(b[:20], want[:20]) {
			t.Fatalf("accepted a header of %d bytes: %x", len(b), b)
		}
	})
}
