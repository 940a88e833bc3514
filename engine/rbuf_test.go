package engine

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// stubLedger records what the engine hands it after a fence.
type stubLedger struct {
	dropped []*RemoteBuffer
	err     error
}

func (l *stubLedger) Drop(bufs []*RemoteBuffer) error {
	l.dropped = append(l.dropped, bufs...)
	return l.err
}

// A task's remote tensors are held from submit to the run's fence: the
// first capture registers the run's fence work (so a run without one has
// none), each tensor holds its buffer once, and the fence lets the holds
// go before it hands the buffers to their ledger, whose error is the
// run's. A buffer with no ledger is only let go.
func TestCaptureHoldsUntilTheFence(t *testing.T) {
	l := &stubLedger{err: errors.New("the ledger failed")}
	a := &RemoteBuffer{NBytes: 8, Ledger: l}
	b := &RemoteBuffer{NBytes: 8, Ledger: l}
	bare := &RemoteBuffer{NBytes: 8}
	r := &Run{}
	r.captureRemote([]RemoteRef{{}, {Inline: []byte{1, 2}}})
	if r.hasFenceWork() {
		t.Fatal("a member with no remote buffer registered fence work")
	}
	ref := func(h *RemoteBuffer) RemoteRef { return RemoteRef{Buf: h} }
	r.captureRemote([]RemoteRef{ref(a), ref(b)}) // a task's first member
	r.captureRemote([]RemoteRef{ref(a)})         // and its second
	r.captureRemote([]RemoteRef{ref(bare)})
	if a.Holds() != 2 || b.Holds() != 1 || bare.Holds() != 1 || !r.hasFenceWork() || len(r.fence[FenceRemote]) != 1 {
		t.Fatalf("holds a %d, b %d, bare %d; fence work %v (%d remote hooks)", a.Holds(), b.Holds(), bare.Holds(), r.hasFenceWork(), len(r.fence[FenceRemote]))
	}
	r.runFence(FenceRemote)
	if a.Holds() != 0 || b.Holds() != 0 || bare.Holds() != 0 {
		t.Errorf("after the fence: holds a %d, b %d, bare %d", a.Holds(), b.Holds(), bare.Holds())
	}
	if !slices.Equal(l.dropped, []*RemoteBuffer{a, b, a}) {
		t.Errorf("the ledger was handed %v, want a, b, a", l.dropped)
	}
	if r.waitErr != l.err || r.captured != nil {
		t.Errorf("run error %v, captured %v; want the ledger's error and nothing left", r.waitErr, r.captured)
	}
}

// RangeError names what is wrong with the numbers as given, near the top
// of uint64 too.
func TestRangeErrorNeverWraps(t *testing.T) {
	const top = ^uint64(0)
	for _, c := range []struct {
		off, n, size uint64
		want         string
	}{
		{top - 4, 8, 64, "op: offset 18446744073709551611 is not inside the 64-byte buffer (its last byte is at offset 63)"},
		{60, top, 64, "op: 18446744073709551615 bytes at offset 60 run 18446744073709551611 bytes past the end of the 64-byte buffer"},
		{0, 0, 64, "op: 0 bytes at offset 0: the range must hold at least one byte"},
		{0, 1, 0, "op: offset 0 is not inside the 0-byte buffer"},
	} {
		err := RangeError("op", c.off, c.n, c.size)
		if KindOf(err) != ValueError || err.Error() != "ValueError: "+c.want && !strings.HasPrefix(err.Error(), "ValueError: "+c.want) {
			t.Errorf("RangeError(%d, %d, %d) = %v, want %q", c.off, c.n, c.size, err, c.want)
		}
	}
}
