package engine

import (
	"math"
	"strings"
	"testing"

	"simpler/hal/comm"
	"simpler/hal/dtype"
	"simpler/wire"
)

// Offsets, sizes and lengths near 2^63 and 2^64 in what the engine reads
// from another process or host, or gets from a caller in this one: each
// must be refused, never wrap into a small number, turn negative as an
// int, or index past the memory it names. (The mailbox's checks are
// engine/proc's, the messages' own bounds wire's.)

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
		err := w.Devices().RunKernel(h, mkArgs(big, Input))
		wantErrText(t, "shape", err, "exceeds 1099511627776 bytes")
	}
	noType := in
	noType.DType = dtype.Invalid
	wantErrText(t, "no dtype", w.Devices().RunKernel(h, mkArgs(noType, Input)), "tensor 0 has no dtype")
	if ran {
		t.Error("the kernel ran")
	}
}
