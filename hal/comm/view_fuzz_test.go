package comm

import (
	"bytes"
	"strings"
	"testing"
	"unsafe"
)

// aligned copies b into 8-byte aligned memory, as device memory is (the
// decoder reads the live word atomically, which needs 4).
func aligned(b []byte) []byte {
	words := make([]uint64, (len(b)+7)/8)
	if len(words) == 0 {
		return []byte{}
	}
	out := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(b))
	copy(out, b)
	return out
}

func sampleCtxs() []ctxFields {
	return []ctxFields{
		{rank: 0, size: 1, windowSize: 1, headerSize: headerSize(1), bases: []uint64{0x1000_0000_0000}},
		{rank: 1, size: 2, windowSize: 4096, allocID: 7, headerBase: 0x1000_0001_0000, headerSize: headerSize(2),
			name: "dom", bases: []uint64{0x1000_0000_0000, 0x1000_0000_1000}},
		{rank: maxRanks - 1, size: maxRanks, windowSize: 1 << 40, allocID: 1 << 63, headerSize: 1 << 30,
			name: strings.Repeat("n", maxNameLen), bases: make([]uint64, maxRanks)},
	}
}

// FuzzDecodeCommContext: a CommContext is read from device memory any
// kernel may have written. Decoding must not panic, and whatever decodes
// re-encodes (encodeCtx) to the same bytes.
func FuzzDecodeCommContext(f *testing.F) {
	for _, c := range sampleCtxs() {
		b := encodeCtx(c)
		if _, err := decodeCtx(aligned(b)); err != nil {
			f.Fatalf("%+v: its own encoding does not decode: %v", c, err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = aligned(b)
		size, nameLen, headErr := ctxHead(b)
		c, err := decodeCtx(b)
		if err != nil {
			return
		}
		if headErr != nil || len(b) != ctxLen(size, nameLen) || len(c.bases) != c.size {
			t.Fatalf("decoded %+v from %d bytes; the head said %d ranks, %d name bytes (%v)", c, len(b), size, nameLen, headErr)
		}
		if again := encodeCtx(c); !bytes.Equal(again, b) {
			t.Fatalf("not canonical:\n  in  %x\n  out %x", b, again)
		}
	})
}
