package engine

import (
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"simpler/engine/hostmem"
	"simpler/hal/comm"
	"simpler/hal/dtype"
	"simpler/hal/shm"
	"simpler/internal/futex"
	"simpler/wire"
)

// Offsets, sizes and lengths near 2^63 and 2^64 in what a child or a
// parent reads from the other side of the mailbox: each must be refused,
// never wrap into a small number, turn negative as an int, or index past
// the memory it names.

const (
	p63 = uint64(1) << 63
	top = uint64(math.MaxUint64)
)

func wantErrText(t *testing.T, what string, err error, text string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), text) {
		t.Errorf("%s: error %v, want one saying %q", what, err, text)
	}
}

// refBytes encodes a hostRef with raw 64-bit size and offset.
func refBytes(e *wire.Encoder, name string, size, off uint64) {
	e.String(name)
	e.U64(size)
	e.U64(off)
}

func TestDecodeRefRefusesOffsetsOutsideTheObject(t *testing.T) {
	cases := []struct {
		size, off uint64
		want      string
	}{
		{64, 64, "is not inside"},
		{64, 1 << 40, "is not inside"},
		{64, p63, "exceeds its bound"}, // int(2^63) would be negative
		{64, top, "exceeds its bound"}, // int(2^64-1) is -1
		{p63, 0, "exceeds its bound"},  // so is a size
		{top, 10, "exceeds its bound"}, //
		{0, 0, "is not inside"},        // an empty object holds no offset
		{1 << 40, 1<<40 - 1, ""},       // the last byte of the largest object
		{64, 63, ""},                   //
	}
	for _, c := range cases {
		var e wire.Encoder
		refBytes(&e, "simpler-1-host-1", c.size, c.off)
		d := wire.NewDecoder(e.Bytes())
		r := decodeRef(d)
		err := d.Finish()
		if c.want == "" {
			if err != nil || uint64(r.off) != c.off || uint64(r.size) != c.size {
				t.Errorf("size %#x off %#x: %+v, %v", c.size, c.off, r, err)
			}
			continue
		}
		wantErrText(t, "decodeRef", err, c.want)
	}
}

// A copy names n bytes at an offset of an object: all n must lie inside,
// checked without forming off+n.
func TestDecodeCopyRequestBounds(t *testing.T) {
	copyReq := func(size, off, n uint64) []byte {
		var e wire.Encoder
		e.U8(opCopyIn)
		e.U64(0x1000_0000_0000)
		refBytes(&e, "simpler-1-host-1", size, off)
		e.U64(n)
		return e.Bytes()
	}
	cases := []struct {
		size, off, n uint64
		want         string
	}{
		{4096, 0, 4096, ""},
		{4096, 4095, 1, ""},
		{4096, 4095, 2, "a copy of 2 bytes"},
		{4096, 1, 1 << 40, "a copy of"},
		{4096, 0, 0, "a copy of 0 bytes"},
		{4096, 16, top - 15, "exceeds its bound"}, // off+n wraps to 0
		{4096, 16, p63, "exceeds its bound"},
		{1 << 40, 1<<40 - 1, 1 << 40, "a copy of"}, // off+n would be 2^41-1, still an int: refused by the check
	}
	for _, c := range cases {
		_, err := decodeCtlReq(copyReq(c.size, c.off, c.n))
		if c.want == "" {
			if err != nil {
				t.Errorf("size %d off %d n %d: %v", c.size, c.off, c.n, err)
			}
			continue
		}
		wantErrText(t, "copy request", err, c.want)
	}
}

func TestDecodeArgsBounds(t *testing.T) {
	tensor := func(shape []uint64, size, off uint64) []byte {
		var e wire.Encoder
		e.U32(1)
		e.U8(uint8(Input))
		e.U8(uint8(dtype.Int8))
		e.U32(uint32(len(shape)))
		for _, d := range shape {
			e.U64(d)
		}
		e.Bool(false)
		refBytes(&e, "simpler-1-host-1", size, off)
		e.U32(0)
		return e.Bytes()
	}
	cases := []struct {
		name      string
		shape     []uint64
		size, off uint64
		want      string
	}{
		{"fits", []uint64{16}, 4096, 4080, ""},
		{"empty at the last byte", []uint64{0}, 4096, 4095, ""},
		{"overruns its object", []uint64{17}, 4096, 4080, "overrun"},
		{"2^32 x 2^32 bytes, 0 in int arithmetic", []uint64{1 << 32, 1 << 32}, 4096, 0, "exceeds"},
		{"2^40 cubed", []uint64{1 << 40, 1 << 40, 1 << 40}, 4096, 0, "exceeds"},
		{"a dimension of 2^63", []uint64{p63}, 4096, 0, "exceeds its bound"},
		{"a dimension of 2^64-1", []uint64{top}, 4096, 0, "exceeds its bound"},
		{"an offset of 2^64-1", []uint64{1}, 4096, top, "exceeds its bound"},
	}
	for _, c := range cases {
		h := newFakeHost()
		d := wire.NewDecoder(tensor(c.shape, c.size, c.off))
		_, err := decodeArgs(d, h.attach)
		if err == nil {
			err = d.Finish()
		}
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		wantErrText(t, c.name, err, c.want)
	}
}

// A count the request cannot hold is refused before anything is allocated
// for it.
func TestCountsAreCheckedAgainstTheBytesLeft(t *testing.T) {
	var e wire.Encoder
	e.U32(maxArgs) // tensors, and nothing after
	d := wire.NewDecoder(e.Bytes())
	_, err := decodeArgs(d, newFakeHost().attach)
	if !errors.Is(err, wire.ErrTruncated) {
		t.Errorf("args: %v, want truncation", err)
	}
	e.Reset()
	e.Int(3)
	e.String("a2a3sim")
	e.U32(wire.MaxDevices) // device ids, and nothing after
	d = wire.NewDecoder(e.Bytes())
	decodeConfig(d)
	if !errors.Is(d.Err(), wire.ErrTruncated) {
		t.Errorf("config: %v, want truncation", d.Err())
	}
}

// A child maps an object once; a later reference claiming another size
// would let offsets reach past the mapping.
func TestAttachRefusesASecondSize(t *testing.T) {
	seg := &shm.Segment{Name: "simpler-1-host-9", Mem: make([]byte, 64)}
	c := &child{attached: map[string]*shm.Segment{seg.Name: seg}}
	if addr, err := c.attach(hostRef{name: seg.Name, size: 64}); err != nil || addr != seg.Addr() {
		t.Fatalf("attach with its size: %#x, %v", addr, err)
	}
	_, err := c.attach(hostRef{name: seg.Name, size: 1 << 40, off: 1<<40 - 1})
	wantErrText(t, "a second size", err, "is mapped here with 64 bytes, not 1099511627776")
	_, err = c.hostBytes(hostRef{name: seg.Name, size: 64, off: 60}, 8)
	wantErrText(t, "hostBytes past the end", err, "8 bytes at offset 60 overrun the 64 bytes")
	_, err = c.hostBytes(hostRef{name: seg.Name, size: 64, off: 1}, math.MaxInt) // off+n overflows int
	wantErrText(t, "hostBytes of MaxInt", err, "overrun the 64 bytes")
}

// hostRefOf names a host slice by its object; the slice must lie inside.
func TestHostRefOf(t *testing.T) {
	seg := &shm.Segment{Name: "simpler-1-host-8", Mem: make([]byte, 256)}
	hostmem.Register(seg)
	defer hostmem.Unregister(seg)
	r, err := hostRefOf(seg.Mem[200:256])
	if err != nil || r != (hostRef{name: seg.Name, size: 256, off: 200}) {
		t.Fatalf("hostRefOf = %+v, %v", r, err)
	}
	_, err = hostRefOf(seg.Mem[256:])
	wantErrText(t, "empty", err, "empty copy")
	_, err = hostRefOf(make([]byte, 8))
	wantErrText(t, "Go memory", err, "is not in shared memory")
}

// A malformed request must not act: a malloc with trailing bytes used to
// allocate and then fail, leaving the allocation behind.
func TestControlDecodesBeforeItActs(t *testing.T) {
	chip, err := sim(t).OpenChip(0)
	if err != nil {
		t.Fatal(err)
	}
	defer chip.Close()
	c := &child{chip: chip, role: roleChip, ranks: map[uint64]*comm.Rank{}}
	var e wire.Encoder
	e.Int(4096)
	e.U8(0) // trailing
	_, err = c.control(opMalloc, wire.NewDecoder(e.Bytes()))
	if !errors.Is(err, wire.ErrTrailing) {
		t.Errorf("malloc with a trailing byte: %v", err)
	}
	if allocs, _ := chip.Live(); allocs != 0 {
		t.Errorf("%d allocations after a refused malloc", allocs)
	}
	e.Reset()
	e.U64(top) // a size of 2^64-1, -1 as an int
	_, err = c.control(opMalloc, wire.NewDecoder(e.Bytes()))
	wantErrText(t, "malloc of 2^64-1", err, "exceeds its bound")
	e.Reset()
	e.U64(0x1000_0000_0000)
	e.U64(p63)
	_, err = c.control(opCheck, wire.NewDecoder(e.Bytes()))
	wantErrText(t, "check of 2^63 bytes", err, "exceeds its bound")
}

func TestDecodeReplyRefusesUnknownKinds(t *testing.T) {
	var e wire.Encoder
	e.U8(statusErr)
	e.String("Oops")
	e.String("msg")
	_, err := decodeReply(e.Bytes())
	wantErrText(t, "an unknown kind", err, `unknown error kind "Oops"`)
	if _, ok := err.(*Error); ok {
		t.Errorf("a malformed reply decoded as the child's error: %v", err)
	}
	_, err = decodeReply(encodeError(Errorf(KeyError, "k")))
	if e, ok := err.(*Error); !ok || e.Kind != KeyError || e.Msg != "k" {
		t.Errorf("a KeyError reply decoded as %#v", err)
	}
}

func TestDecodeConfigRefusesAnAlias(t *testing.T) {
	var e wire.Encoder
	encodeConfig(&e, sampleConfigs(t)[0])
	b := e.Bytes()
	// The platform name follows the level: "a2a3sim" becomes the alias "sim".
	var alias wire.Encoder
	alias.Raw(b[:8])
	alias.String("sim")
	alias.Raw(b[8+4+len("a2a3sim"):])
	d := wire.NewDecoder(alias.Bytes())
	decodeConfig(d)
	wantErrText(t, "the alias sim", d.Finish(), `platform "sim" is named "a2a3sim"`)
}

// More launcher arguments than a child passes on used to be cut to 64
// silently, and the rest read as the next fields.
func TestDecodeInitRefusesTooManyArgs(t *testing.T) {
	m := &initMsg{role: roleSub, device: -1, launcher: Launcher{Args: make([]string, maxLauncherArgs+1)}}
	var e wire.Encoder
	encodeInit(&e, m)
	_, err := decodeInit(e.Bytes())
	wantErrText(t, "65 args", err, "count 65 exceeds its bound 64")
	m.launcher.Args = m.launcher.Args[:maxLauncherArgs]
	e.Reset()
	encodeInit(&e, m)
	if _, err := decodeInit(e.Bytes()); err != nil {
		t.Errorf("64 args: %v", err)
	}
}

func TestLaneBytes(t *testing.T) {
	area := make([]byte, 16)
	for _, n := range []uint32{0, 16} {
		if b, err := laneBytes(area, n, "a request"); err != nil || len(b) != int(n) {
			t.Errorf("length %d: %d bytes, %v", n, len(b), err)
		}
	}
	for _, n := range []uint32{17, 1 << 31, math.MaxUint32} {
		_, err := laneBytes(area, n, "a request")
		wantErrText(t, "a length beyond the area", err, "exceeds the mailbox's 16")
	}
}

// A child that writes a reply length beyond the reply area fails the call;
// the parent used to slice past the area and panic.
func TestParentRefusesAnOversizeReplyLength(t *testing.T) {
	parent, err := newMailbox()
	if err != nil {
		t.Fatal(err)
	}
	defer parent.seg.Close()
	kid, err := openMailbox(parent.seg.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer kid.seg.Close()
	done := make(chan error, 1)
	go func() {
		l := kid.lanes[laneControl]
		req, live, err := l.next(func() bool { return false })
		if err == nil && (!live || len(req) != 1) {
			err = errors.New("the child did not get the request")
		}
		atomic.StoreUint32(l.respLen, math.MaxUint32)
		futex.Signal(l.respSeq, l.respSleep)
		done <- err
	}()
	_, err = parent.lanes[laneControl].call([]byte{opShutdown}, time.Now().Add(20*time.Second), func() error { return nil })
	wantErrText(t, "reply length 2^32-1", err, "the child's reply of 4294967295 bytes exceeds the mailbox's 1048576")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestDecodeDescsBound(t *testing.T) {
	_, err := decodeDescs(make([]byte, (wire.MaxRanks+1)*comm.DescriptorSize))
	wantErrText(t, "a table of MaxRanks+1", err, "exceeds the bound 4096")
	_, err = decodeDescs(make([]byte, comm.DescriptorSize+1))
	wantErrText(t, "a partial descriptor", err, "is not whole descriptors")
}

// A node in the broker's own process gets STAGE commands as the broker
// built them, unbounded by the wire decoder.
func TestGlobalStageBounds(t *testing.T) {
	g := &nodeGlobal{req: nodeGlobalReq{ID: 1, Gen: 1, WindowSize: 4096, Places: []GlobalPlace{{Rank: 0}}}, committed: true}
	w := &Worker{globals: map[uint64]*nodeGlobal{1: g}}
	dom := wire.Domain{ID: 1, Generation: 1}
	cases := []wire.Control{
		{Cmd: wire.CmdStageFrom, Domain: dom, Offset: 1, NBytes: top},   // int(NBytes) was -1, and 1+(2^64-1) wraps to 0
		{Cmd: wire.CmdStageFrom, Domain: dom, Offset: 0, NBytes: p63},   // int(2^63) is negative
		{Cmd: wire.CmdStageFrom, Domain: dom, Offset: top, NBytes: 1},   // wraps to 0
		{Cmd: wire.CmdStageFrom, Domain: dom, Offset: p63, NBytes: p63}, // wraps to 0
		{Cmd: wire.CmdStageFrom, Domain: dom, Offset: 4096, NBytes: 1},
		{Cmd: wire.CmdStageTo, Domain: dom, Offset: top - 3, Data: make([]byte, 8)}, // wraps to 4
		{Cmd: wire.CmdStageTo, Domain: dom, Offset: 4089, Data: make([]byte, 8)},
	}
	for _, c := range cases {
		var r wire.ControlReply
		err := w.globalStage(c, &r)
		wantErrText(t, c.Cmd.String(), err, "overrun the 4096-byte window")
		if r.Data != nil {
			t.Errorf("%s at %#x: %d bytes of reply", c.Cmd, c.Offset, len(r.Data))
		}
	}
}

// A shape whose bytes overflow int had 0 bytes by NBytes, so nothing of it
// was checked against the host memory under it.
func TestRunKernelRefusesOverflowingShapes(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, Config{Level: 2, DeviceIDs: []int{0}})
	ran := false
	h := register(t, w, chipK("k", func(*ChipCtx, *TaskArgs) error { ran = true; return nil }))
	in, _ := hostI64(t, sp, 1)
	for _, shape := range [][]int{{1 << 32, 1 << 32}, {1 << 62, 4}, {-1, 8}} {
		big := in
		big.Shape = shape
		err := w.RunKernel(h, mkArgs(big, Input))
		wantErrText(t, "shape", err, "exceeds 1099511627776 bytes")
	}
	noType := in
	noType.DType = dtype.Invalid
	wantErrText(t, "no dtype", w.RunKernel(h, mkArgs(noType, Input)), "tensor 0 has no dtype")
	if ran {
		t.Error("the kernel ran")
	}
}

// A STAGE_FROM for a process-mode node is split into mailbox-sized pieces
// by its size, which as an int may be negative.
func TestProcGlobalRefusesHugeStageFrom(t *testing.T) {
	p := &proc{name: "node"}
	for _, n := range []uint64{top, p63, wire.MaxStage + 1} {
		_, err := p.global(&wire.Control{Cmd: wire.CmdStageFrom, Domain: wire.Domain{ID: 1, Generation: 1}, NBytes: n})
		wantErrText(t, "STAGE_FROM", err, "exceeds the bound 8388608")
	}
}
