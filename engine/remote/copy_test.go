package remote

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"simpler/engine"
	"simpler/internal/enginetest"
	"simpler/internal/loopbulk"
	"simpler/wire"
)

// TestBulkCopiesArriveWhole copies more than the sockets' buffers hold
// (so the writes stall on full buffers, and the reads are placed straight
// into the node's buffer and the destination) at an odd offset and
// length, there and back, and checks every byte.
func TestBulkCopiesArriveWhole(t *testing.T) {
	_, addr := startDaemon(t)
	w := enginetest.Must(newParent(engine.Config{Level: 4, Platform: sim(t), SessionTimeout: 30 * time.Second}))
	defer w.Close()
	enginetest.Must(w.AddRemoteWorker(engine.RemoteSpec{Endpoint: addr, Platform: "a2a3sim", DeviceIDs: []int{0}}))
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	const size, off = 24 << 20, 4093
	h := enginetest.Must(outside(w).Malloc(0, size))
	src := make([]byte, size-off-5)
	for i := 0; i+8 <= len(src); i += 8 {
		binary.LittleEndian.PutUint64(src[i:], uint64(i)*0x9e3779b97f4a7c15)
	}
	for round := 0; round < 2; round++ { // the second reuses both ends' memory
		src[round] ^= 0xff
		if err := outside(w).CopyTo(h, src, off); err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, len(src))
		if err := outside(w).CopyFrom(h, dst, off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst, src) {
			i := 0
			for dst[i] == src[i] {
				i++
			}
			t.Fatalf("round %d: byte %d of %d came back %#x, sent %#x", round, i, len(src), dst[i], src[i])
		}
	}
	bulkFallbacks(t, nodeOf(w, 0), wire.BufferRef{ID: h.BufferID, Generation: h.Gen}, size, src[:2<<20], off)
	if err := Free(h); err != nil {
		t.Fatal(err)
	}
}

// bulkFallbacks sends large frames that cannot be placed where their data
// belongs, so both ends read them whole: a COPY_TO that overruns the
// buffer (refused, the buffer untouched) and a COPY_FROM with no sink
// (its data comes back in the reply).
func bulkFallbacks(t *testing.T, n *testNode, ref wire.BufferRef, size int, want []byte, off int) {
	t.Helper()
	_, release, err := n.ControlData(&wire.Control{Cmd: wire.CmdCopyTo, Buffer: ref, Offset: uint64(size - 1)}, make([]byte, 2<<20), nil)
	release()
	if engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), "bytes past the end of the") {
		t.Fatalf("a COPY_TO past the end: %v, want a ValueError naming the overrun", err)
	}
	r, release, err := n.ControlData(&wire.Control{Cmd: wire.CmdCopyFrom, Buffer: ref, Offset: uint64(off), NBytes: uint64(len(want))}, nil, nil)
	if err != nil || !bytes.Equal(r.Data, want) {
		t.Fatalf("a COPY_FROM without a sink: %d bytes, %v; want the %d bytes copied there", len(r.Data), err, len(want))
	}
	release()
}

// copyBytes is the size of one bulk copy in the copy benchmarks: the
// largest a single COPY_TO / COPY_FROM carries.
const copyBytes = 64 << 20

// copyWorker brings up a parent with one remote node and a copyBytes
// owner buffer on it; the caller closes the worker.
func copyWorker(b *testing.B) (*engine.Worker, *engine.RemoteBuffer) {
	_, addr := startDaemon(b)
	w := enginetest.Must(newParent(engine.Config{Level: 4, Platform: sim(b), SessionTimeout: 10 * time.Second}))
	enginetest.Must(w.AddRemoteWorker(engine.RemoteSpec{Endpoint: addr, Platform: "a2a3sim", DeviceIDs: []int{0}}))
	if err := w.Init(); err != nil {
		b.Fatal(err)
	}
	h, err := outside(w).Malloc(0, copyBytes)
	if err != nil {
		w.Close()
		b.Fatal(err)
	}
	return w, h
}

// BenchmarkRemoteCopyTo measures a 64 MiB remote_copy_to (compare
// BenchmarkLoopbackTCP: the raw limit).
func BenchmarkRemoteCopyTo(b *testing.B) {
	benchCopy(b, func(w *engine.Worker, h *engine.RemoteBuffer, buf []byte) error { return outside(w).CopyTo(h, buf, 0) })
}

// BenchmarkRemoteCopyFrom measures a 64 MiB remote_copy_from.
func BenchmarkRemoteCopyFrom(b *testing.B) {
	benchCopy(b, func(w *engine.Worker, h *engine.RemoteBuffer, buf []byte) error {
		return outside(w).CopyFrom(h, buf, 0)
	})
}

// benchCopy times copy of a 64 MiB buffer to or from a remote buffer.
func benchCopy(b *testing.B, copy func(w *engine.Worker, h *engine.RemoteBuffer, buf []byte) error) {
	w, h := copyWorker(b)
	defer w.Close()
	buf := make([]byte, copyBytes)
	for i := range buf {
		buf[i] = byte(i)
	}
	b.SetBytes(copyBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := copy(w, h, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoopbackTCP measures 64 MiB written over raw loopback TCP and
// acknowledged by the reader with one byte (internal/loopbulk, the limit
// simpler bench remote compares with).
func BenchmarkLoopbackTCP(b *testing.B) {
	c, err := loopbulk.Dial(copyBytes)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(copyBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.Send(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := c.Close(); err != nil {
		b.Fatal(err)
	}
}
