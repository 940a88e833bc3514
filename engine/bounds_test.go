package engine

import (
	"math"
	"strings"
	"testing"

	"simpler/hal/dtype"
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
