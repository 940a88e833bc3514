package remote

import (
	"math"
	"strings"
	"testing"

	"simpler/engine"
	"simpler/internal/enginetest"
	"simpler/wire"
)

// A range that does not fit is refused saying what is wrong, with the
// numbers as given: an offset past the buffer is named as such (it was
// "-64 bytes at offset 128"), and one near the top of uint64 does not wrap
// round (the wire bounds what reaches a daemon; engine's
// TestRangeErrorNeverWraps has the top of uint64). The parent refuses
// before sending; the daemon, sent such ranges raw, says the same.
func TestRemoteRangeRefusalsSayWhatIsWrong(t *testing.T) {
	_, addr := startDaemon(t)
	w := remoteWorker(t, addr)
	h := enginetest.Must(outside(w).Malloc(0, 64))
	for _, c := range []struct {
		offset, n int
		want      string
	}{
		{128, 64 - 128, "remote_export: offset 128 is not inside the 64-byte buffer (its last byte is at offset 63)"},
		{64, 1, "remote_export: offset 64 is not inside the 64-byte buffer"},
		{-1, 8, "remote_export: offset -1 is negative"},
		{8, -8, "remote_export: nbytes -8 is negative"},
		{8, 0, "remote_export: 0 bytes at offset 8: the range must hold at least one byte"},
		{32, 40, "remote_export: 40 bytes at offset 32 run 8 bytes past the end of the 64-byte buffer"},
		{1, math.MaxInt, "remote_export: 9223372036854775807 bytes at offset 1 run 9223372036854775744 bytes past the end of the 64-byte buffer"},
	} {
		_, err := outside(w).Export(h, c.offset, c.n, engine.AccessRW)
		if engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), c.want) {
			t.Errorf("export of %d bytes at %d: %v; want a ValueError with %q", c.n, c.offset, err, c.want)
		}
	}
	n := nodeOf(w, 0)
	ref := wire.BufferRef{ID: h.BufferID, Generation: h.Gen}
	for _, c := range []struct {
		offset, n uint64
		want      string
	}{
		{128, 8, "EXPORT: offset 128 is not inside the 64-byte buffer (its last byte is at offset 63)"},
		{1 << 39, 8, "EXPORT: offset 549755813888 is not inside the 64-byte buffer"},
		{60, 1 << 39, "EXPORT: 549755813888 bytes at offset 60 run 549755813884 bytes past the end of the 64-byte buffer"},
	} {
		_, err := n.Control(&wire.Control{Cmd: wire.CmdExport, Buffer: ref, Offset: c.offset, NBytes: c.n, Access: wire.AccessReadWrite})
		if engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), c.want) {
			t.Errorf("a raw EXPORT of %d bytes at %d: %v; want a ValueError with %q", c.n, c.offset, err, c.want)
		}
	}
	_, err := n.Control(&wire.Control{Cmd: wire.CmdCopyFrom, Buffer: ref, Offset: 56, NBytes: 16})
	if want := "COPY_FROM: 16 bytes at offset 56 run 8 bytes past the end of the 64-byte buffer"; engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), want) {
		t.Errorf("a raw COPY_FROM past the end: %v; want %q", err, want)
	}
	if err := Free(h); err != nil {
		t.Fatal(err)
	}
}

// A remote buffer handle used after remote_free or remote_release_import
// is a RuntimeError, as a freed host tensor and a released domain are:
// copies, exports, imports of an export made before, and tasks.
func TestRemoteHandleUsedAfterReleaseIsARuntimeError(t *testing.T) {
	_, a := startDaemon(t)
	_, b := startDaemon(t)
	w := remoteWorker(t, a, b)
	owner := enginetest.Must(outside(w).Malloc(0, 8))
	exp := enginetest.Must(outside(w).Export(owner, 0, 8, engine.AccessRW))
	view := enginetest.Must(outside(w).Import(exp, 1, 0))
	if err := ReleaseImport(view); err != nil {
		t.Fatal(err)
	}
	if err := Free(owner); err != nil {
		t.Fatal(err)
	}
	node, _ := w.Registry().Lookup(nodeOrch{procKernel{"node_add1"}}.Digest())
	task := func(h *engine.RemoteBuffer, worker int) error {
		return submitRun(t, w, func(o *engine.Orchestrator) error {
			_, err := o.SubmitNext(node, mkArgs(remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: 7}, Ref: engine.RemoteRef{Buf: h}}, engine.InOut), nil, worker)
			return err
		})
	}
	buf := make([]byte, 8)
	for what, err := range map[string]error{
		"remote_copy_to":   outside(w).CopyTo(owner, buf, 0),
		"remote_copy_from": outside(w).CopyFrom(owner, buf, 0),
		"remote_export":    func() error { _, err := outside(w).Export(owner, 0, 8, engine.AccessRW); return err }(),
		"remote_import":    func() error { _, err := outside(w).Import(exp, 1, 0); return err }(),
		"a task's owner":   task(owner, 0),
		"a task's import":  task(view, 1),
	} {
		if engine.KindOf(err) != engine.RuntimeError || !strings.Contains(err.Error(), "was released") {
			t.Errorf("%s after release: %v; want a RuntimeError saying it was released", what, err)
		}
	}
}
