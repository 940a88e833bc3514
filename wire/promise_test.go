package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"
)

// allocated is how many bytes fn allocates.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A peer that announces a payload of MaxPayload (64 MiB and more) and
// sends nothing costs the reader the first 1 MiB chunk, not the payload
// it announced (docs/protocol.md, "Frame header").
func TestAnnouncedPayloadCostsWhatArrives(t *testing.T) {
	hb := EncodeHeader(Header{Version: ProtocolVersion, Type: TypeControl, Session: 1, Seq: 1, Length: MaxPayload})
	var err error
	n := allocated(func() { _, _, err = ReadFrame(bytes.NewReader(hb[:]), 0) })
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("a header and no payload: %v, want ErrTruncated", err)
	}
	if n > 2*readChunk {
		t.Errorf("reading a frame that announced %d bytes and sent none allocated %d bytes, want at most about %d", MaxPayload, n, readChunk)
	}
}

// A count is checked against the bytes that remain before anything is
// allocated for it: a TASK that claims 4096 tensors and carries none is
// truncation, found without making room for them.
func TestCountCheckedBeforeAllocation(t *testing.T) {
	p := Payload(&Task{Digest: "sha256:x"})
	// The payload ends with the tensor count and the scalar count, both 0:
	// claim the bound of tensors, with nothing after.
	cut := p[:len(p)-8]
	cut = binary.LittleEndian.AppendUint32(cut, 4096)
	var err error
	n := allocated(func() { _, err = DecodeTask(cut) })
	if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "4096 elements") {
		t.Fatalf("a TASK claiming 4096 tensors with none: %v, want truncation naming the count", err)
	}
	if n > 4096 {
		t.Errorf("decoding it allocated %d bytes", n)
	}
}
