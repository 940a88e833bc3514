package engine

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/hal/comm"
	"simpler/hal/dtype"
	"simpler/hal/shm"
	"simpler/wire"
)

// Fuzz targets for the mailbox messages (procmsg.go) and the child's
// request decoding (procchild.go). Each seeds from the package's own
// encoders and checks that decoding never panics and that whatever
// decodes re-encodes to the same bytes.

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
	i, seen := h.index[r.name]
	if !seen {
		i = len(h.refs)
		h.index[r.name] = i
		h.refs = append(h.refs, r)
	}
	if h.refs[i].size != r.size {
		return 0, fmt.Errorf("ValueError: %s is mapped with %d bytes, not %d", r.name, h.refs[i].size, r.size)
	}
	return uint64(i+1) * fakeSpan, nil
}

func (h *fakeHost) locate(addr uint64) (hostRef, bool) {
	i := int(addr/fakeSpan) - 1
	if i < 0 || i >= len(h.refs) {
		return hostRef{}, false
	}
	r := h.refs[i]
	r.off = int(addr % fakeSpan)
	return r, true
}

// sampleArgs are task args of every kind of tensor, with their host
// tensors placed in h.
func sampleArgs(h *fakeHost) []*TaskArgs {
	at := func(name string, size, off int) uint64 {
		base, err := h.attach(hostRef{name: name, size: size})
		if err != nil {
			panic(err)
		}
		return base + uint64(off)
	}
	host := Tensor{Addr: at("simpler-1-host-1", 4096, 64), Shape: []int{4, 8}, DType: dtype.Float32}
	dev := Tensor{Addr: 0x1000_0000_0200, Shape: []int{16}, DType: dtype.Int64, ChildMemory: true}
	empty := Tensor{Addr: at("simpler-1-host-2", 64, 63), Shape: []int{0, 1 << 40}, DType: dtype.Float16}
	return []*TaskArgs{
		{},
		{Scalars: []uint64{1, 1 << 63}},
		{Tensors: []Tensor{host, dev, empty}, Tags: []Tag{Input, OutputExisting, NoDep}, Scalars: []uint64{7}},
		{Tensors: []Tensor{host, host}, Tags: []Tag{InOut, Output}},
	}
}

// A decoder under test: it returns, for bytes that decode, the encoder
// call that should write them back.
type decodeFunc func(b []byte) (reencode func(e *wire.Encoder) error, err error)

// fuzzCanonical fuzzes decode from seeds, each of which must decode (a
// seed the decoder refuses would leave the canonical check unexercised):
// decoding must not panic, and whatever decodes must re-encode to the
// same bytes.
func fuzzCanonical(f *testing.F, seeds [][]byte, decode decodeFunc) {
	for _, b := range seeds {
		if _, err := decode(b); err != nil {
			f.Fatalf("seed %x does not decode: %v", b, err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		reencode, err := decode(b)
		if err != nil {
			return
		}
		canonical(t, b, reencode)
	})
}

// canonical fails t unless encode writes b.
func canonical(t *testing.T, b []byte, encode func(e *wire.Encoder) error) {
	t.Helper()
	var e wire.Encoder
	if err := encode(&e); err != nil {
		t.Fatalf("%x decodes but does not re-encode: %v", b, err)
	}
	if !bytes.Equal(e.Bytes(), b) {
		t.Fatalf("not canonical:\n  in  %x\n  out %x", b, e.Bytes())
	}
}

// encoded is what build writes.
func encoded(build func(e *wire.Encoder)) []byte {
	var e wire.Encoder
	build(&e)
	return e.Bytes()
}

func FuzzDecodeReply(f *testing.F) {
	for _, err := range []error{
		Errorf(ValueError, "bad"),
		errors.New("TypeError: from a lower layer"),
		errors.New("no kind at all"),
		Wrap(Errorf(KeyError, "inner"), "outer"),
		&TaskError{TaskID: 3, Worker: "chip_worker 1", Callable: "k", Err: Errorf(TimeoutError, "slow")},
	} {
		f.Add(encodeError(err))
	}
	f.Add(ok(nil))
	f.Add(ok(func(e *wire.Encoder) { e.U64(0x1000_0000_0000) }))
	f.Add(ok(rankReply{deviceCtx: 1 << 44, windowBase: 1<<44 + 4096, windowSize: 4096}.encode))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeReply(b)
		switch err.(type) {
		case nil:
			if b[0] != statusOK || d.Offset() != 1 {
				t.Fatalf("%x: an OK reply of status %d with its result at %d", b, b[0], d.Offset())
			}
			// The result decoders a parent applies to an OK reply.
			rd := wire.NewDecoder(b[1:])
			if r, err := decodeRankReply(rd); err == nil {
				canonical(t, b[1:], func(e *wire.Encoder) error { r.encode(e); return nil })
			}
		case *Error, *TaskError:
			canonical(t, b, func(e *wire.Encoder) error { e.Raw(encodeError(err)); return nil })
		}
	})
}

func FuzzDecodeArgs(f *testing.F) {
	h := newFakeHost()
	var seeds [][]byte
	for _, a := range sampleArgs(h) {
		var e wire.Encoder
		if err := encodeArgsWith(&e, a, h.locate); err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, e.Bytes())
	}
	fuzzCanonical(f, seeds, func(b []byte) (func(*wire.Encoder) error, error) {
		h := newFakeHost()
		d := wire.NewDecoder(b)
		a, err := decodeArgs(d, h.attach)
		if err == nil {
			err = d.Finish()
		}
		if err != nil {
			return nil, err
		}
		if len(a.Tensors) != len(a.Tags) {
			return nil, fmt.Errorf("%d tensors, %d tags", len(a.Tensors), len(a.Tags))
		}
		for i, ten := range a.Tensors {
			if _, ok := tensorBytes(ten); !ok || ten.DType.Size() == 0 {
				panic(fmt.Sprintf("tensor %d decoded with shape %v of %s", i, ten.Shape, ten.DType))
			}
		}
		return func(e *wire.Encoder) error { return encodeArgsWith(e, a, h.locate) }, nil
	})
}

func FuzzDecodeRef(f *testing.F) {
	var seeds [][]byte
	for _, r := range []hostRef{{"simpler-1-host-1", 4096, 0}, {"x", 1, 0}, {"simpler-9-hostbuf-3", 1 << 40, 1<<40 - 1}} {
		seeds = append(seeds, encoded(func(e *wire.Encoder) { encodeRef(e, r) }))
	}
	fuzzCanonical(f, seeds, func(b []byte) (func(*wire.Encoder) error, error) {
		d := wire.NewDecoder(b)
		r := decodeRef(d)
		if err := d.Finish(); err != nil {
			return nil, err
		}
		if r.name == "" || r.off < 0 || r.off >= r.size {
			panic(fmt.Sprintf("decoded %+v", r))
		}
		return func(e *wire.Encoder) error { encodeRef(e, r); return nil }, nil
	})
}

// FuzzHostRefOf: the ref of any non-empty slice of a registered object
// names that object and the slice's offset, and survives encoding.
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
		if err != nil || r != (hostRef{name: seg.Name, size: size, off: o}) {
			t.Fatalf("%d bytes at %d: %+v, %v", k, o, r, err)
		}
		d := wire.NewDecoder(encoded(func(e *wire.Encoder) { encodeRef(e, r) }))
		if back := decodeRef(d); d.Finish() != nil || back != r {
			t.Fatalf("%+v decodes as %+v (%v)", r, back, d.Err())
		}
	})
}

func FuzzDecodeCallConfig(f *testing.F) {
	var seeds [][]byte
	for _, c := range []*CallConfig{nil, {BlockDim: 1 << 20, AicpuThreadNum: 0, EnableProfiling: true}} {
		seeds = append(seeds, encoded(func(e *wire.Encoder) { encodeCallConfig(e, c) }))
	}
	fuzzCanonical(f, seeds, func(b []byte) (func(*wire.Encoder) error, error) {
		d := wire.NewDecoder(b)
		c := decodeCallConfig(d)
		return func(e *wire.Encoder) error { encodeCallConfig(e, &c); return nil }, d.Finish()
	})
}

func sampleConfigs(tb testing.TB) []Config {
	p, err := hal.Lookup("a2a3sim")
	if err != nil {
		tb.Fatal(err)
	}
	return []Config{
		{Level: 3, Platform: p},
		{Level: 3, Platform: p, DeviceIDs: []int{0, 1, 2, 3}, NumSubWorkers: 2, Mode: "process", EnableSDMA: true,
			HeapRingSize: 64 << 20, TaskWindow: 128, StartupTimeout: 30 * time.Second, CommProfile: "sim",
			GlobalDeviceRanks: []int{4, 5, 6, 7}},
	}
}

func FuzzDecodeConfig(f *testing.F) {
	var seeds [][]byte
	for _, c := range sampleConfigs(f) {
		seeds = append(seeds, encoded(func(e *wire.Encoder) { encodeConfig(e, c) }))
	}
	fuzzCanonical(f, seeds, func(b []byte) (func(*wire.Encoder) error, error) {
		d := wire.NewDecoder(b)
		c := decodeConfig(d)
		return func(e *wire.Encoder) error { encodeConfig(e, c); return nil }, d.Finish()
	})
}

func FuzzDecodeInit(f *testing.F) {
	l := Launcher{Path: "/bin/simpler", Args: []string{"__child"}, Bundle: []byte("bundle")}
	msgs := []*initMsg{
		{role: roleChip, workerID: 1, prefix: "simpler-1-", launcher: l, platform: "a2a3sim", device: 3},
		{role: roleSub, workerID: 0, prefix: "simpler-1-", platform: "a5sim", device: -1},
	}
	for _, c := range sampleConfigs(f) {
		msgs = append(msgs, &initMsg{role: roleNode, workerID: 2, prefix: "simpler-1-", launcher: l, cfg: c})
	}
	var seeds [][]byte
	for _, m := range msgs {
		seeds = append(seeds, encoded(func(e *wire.Encoder) { encodeInit(e, m) }))
	}
	fuzzCanonical(f, seeds, func(b []byte) (func(*wire.Encoder) error, error) {
		m, err := decodeInit(b)
		return func(e *wire.Encoder) error { encodeInit(e, m); return nil }, err
	})
}

func sampleCtlReqs() []ctlReq {
	ref := hostRef{name: "simpler-1-host-1", size: 4096, off: 128}
	return []ctlReq{
		{op: opShutdown},
		{op: opRegister, digest: "sha256:ab", module: "main.star", name: "k"},
		{op: opMalloc, size: 4096},
		{op: opFree, ptr: 0x1000_0000_0000},
		{op: opCheck, ptr: 0x1000_0000_0000, size: 16},
		{op: opCopyIn, ptr: 0x1000_0000_0000, ref: ref, size: 4096 - 128},
		{op: opCopyOut, ptr: 0x1000_0000_0200, ref: ref, size: 1},
		{op: opCommAlloc, comm: comm.Request{Namespace: "w", AllocationID: 7, Name: "d", Ranks: 4, WindowSize: 1 << 20, Timeout: time.Second}, rank: 3},
		{op: opCommRelease, ptr: 7},
		{op: opGlobal, global: wire.Control{Cmd: wire.CmdCommit, Domain: wire.Domain{ID: 1, Generation: 2}}},
		{op: opGlobal, global: wire.Control{Cmd: wire.CmdStageFrom, Domain: wire.Domain{ID: 1, Generation: 2}, Rank: 1, Offset: 64, NBytes: 8}},
	}
}

func FuzzDecodeControlRequest(f *testing.F) {
	var seeds [][]byte
	for _, r := range sampleCtlReqs() {
		seeds = append(seeds, encoded(r.encode))
	}
	fuzzCanonical(f, seeds, func(b []byte) (func(*wire.Encoder) error, error) {
		r, err := decodeCtlReq(b)
		return func(e *wire.Encoder) error { r.encode(e); return nil }, err
	})
}

func FuzzDecodeTaskRequest(f *testing.F) {
	h := newFakeHost()
	var seeds [][]byte
	for i, a := range sampleArgs(h) {
		op := []uint8{opRunChip, opRunSub, opRunOrch}[i%3]
		r := taskReq{op: op, digest: "sha256:00", args: a, cfg: CallConfig{BlockDim: i, AicpuThreadNum: 2}}
		var e wire.Encoder
		if err := encodeTask(&e, &r, h.locate); err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, e.Bytes())
	}
	fuzzCanonical(f, seeds, func(b []byte) (func(*wire.Encoder) error, error) {
		h := newFakeHost()
		d := wire.NewDecoder(b)
		op := d.U8()
		if err := d.Err(); err != nil {
			return nil, err
		}
		r, err := decodeTask(op, d, h.attach)
		return func(e *wire.Encoder) error { return encodeTask(e, r, h.locate) }, err
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
