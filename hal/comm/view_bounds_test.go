package comm

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

// The CommContext's sizes come from device memory any kernel may write:
// values near 2^63 and 2^64 must be refused before they become a length or
// an int.
func TestCtxHeadRefusesHugeFields(t *testing.T) {
	good := sampleCtxs()[1]
	le := binary.LittleEndian
	cases := []struct {
		name string
		off  int
		v    uint64
		w    int // 4 or 8 bytes
	}{
		{"rank count 2^32-1", offSize, math.MaxUint32, 4},
		{"rank 2^32-1", offRank, math.MaxUint32, 4},
		{"name length 2^32-1", offNameLen, math.MaxUint32, 4},
		{"window size 2^63", offWindowSize, 1 << 63, 8},
		{"window size 2^64-1", offWindowSize, math.MaxUint64, 8},
		{"window size 2^40+1", offWindowSize, 1<<40 + 1, 8},
		{"header size 2^63", offHeaderSize, 1 << 63, 8},
		{"header size 2^64-1", offHeaderSize, math.MaxUint64, 8},
		{"the reserved word", offReserved, 1, 4},
	}
	for _, c := range cases {
		b := aligned(encodeCtx(good))
		if c.w == 4 {
			le.PutUint32(b[c.off:], uint32(c.v))
		} else {
			le.PutUint64(b[c.off:], c.v)
		}
		if _, _, err := ctxHead(b); err == nil || err.Error() != "corrupt CommContext" {
			t.Errorf("%s: %v, want corrupt", c.name, err)
		}
		if _, err := decodeCtx(b); err == nil {
			t.Errorf("%s: decoded", c.name)
		}
	}
	b := aligned(encodeCtx(good))
	if _, err := decodeCtx(b[:len(b)-1]); err == nil || !strings.Contains(err.Error(), "want 83") {
		t.Errorf("a context a byte short: %v", err)
	}
	if _, _, err := ctxHead(b[:offBases-1]); err == nil {
		t.Error("a head a byte short decoded")
	}
}

// word checks that a width-byte word lies in a rank's window, without
// forming addr+width or base+size.
func TestWordBoundsNearTheTop(t *testing.T) {
	win := aligned(make([]byte, 4096))
	for _, base := range []uint64{0x1000_0000_0000, math.MaxUint64 - 4095} { // the second window ends at 2^64
		v := &View{size: 1, winSize: 4096, bases: []uint64{base}, wins: [][]byte{win}, name: "t"}
		cases := []struct {
			addr  uint64
			width int
			ok    bool
		}{
			{base, 8, true},
			{base + 4088, 8, true},
			{base + 4092, 4, true},
			{base + 4092, 8, false},
			{base + 4096, 4, false},
			{base - 8, 8, false},
			{base + 1<<63, 8, false},
			{base - 1<<63, 8, false},
			{math.MaxUint64 - 3, 4, base != 0x1000_0000_0000},
			{0, 4, false},
		}
		for _, c := range cases {
			_, err := v.word("comm.notify", 0, c.addr, c.width)
			if c.ok != (err == nil) {
				t.Errorf("base %#x: word at %#x of %d bytes: %v, want ok %v", base, c.addr, c.width, err, c.ok)
			}
		}
	}
}
