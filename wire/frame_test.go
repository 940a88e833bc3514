package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

func goodHeader() Header {
	return Header{Version: ProtocolVersion, Type: TypeTask, Session: 0xabcdef, Worker: 3, Seq: 17, Length: 100}
}

func TestHeaderLayout(t *testing.T) {
	h := goodHeader()
	b := EncodeHeader(h)
	want := []byte{'S', 'M', 'P', 'L', byte(ProtocolVersion), 0, byte(TypeTask), 0,
		0xef, 0xcd, 0xab, 0, 0, 0, 0, 0, // session
		3, 0, 0, 0, // worker
		17, 0, 0, 0, 0, 0, 0, 0, // seq
		100, 0, 0, 0, // length
		0, 0, 0, 0} // reserved
	if !bytes.Equal(b[:], want) {
		t.Fatalf("layout\n got  %x\n want %x", b, want)
	}
	got, err := DecodeHeader(b[:])
	if err != nil || got != h {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
}

func TestHeaderRoundTripEveryType(t *testing.T) {
	for typ := TypeChallenge; typ.Valid(); typ++ {
		h := Header{Version: ProtocolVersion, Type: typ, Session: 9, Worker: 1, Seq: 5}
		switch typ {
		case TypeChallenge, TypeJoin:
			h = Header{Version: ProtocolVersion, Type: typ, Length: ChallengeSize}
		case TypeHello, TypeHelloReply, TypeOutput:
			h.Seq = 0
		case TypeShutdown:
			h.Seq, h.Flags = 0, FlagDrain
		}
		b := EncodeHeader(h)
		got, err := DecodeHeader(b[:])
		if err != nil || got != h {
			t.Errorf("%s: %+v, %v", typ, got, err)
		}
	}
}

func TestHeaderRejections(t *testing.T) {
	cases := []struct {
		name   string
		change func(b []byte)
		want   error
	}{
		{"bad magic", func(b []byte) { b[0] = 'X' }, ErrMagic},
		{"version 0", func(b []byte) { binary.LittleEndian.PutUint16(b[4:], 0) }, ErrVersion},
		{"version 3", func(b []byte) { binary.LittleEndian.PutUint16(b[4:], 3) }, ErrVersion},
		{"next version", func(b []byte) { binary.LittleEndian.PutUint16(b[4:], ProtocolVersion+1) }, ErrVersion},
		{"type 0", func(b []byte) { b[6] = 0 }, ErrType},
		{"type unknown", func(b []byte) { b[6] = uint8(numTypes) }, ErrType},
		{"unknown flag", func(b []byte) { b[7] = 0x80 }, ErrFlags},
		{"flag on wrong type", func(b []byte) { b[7] = uint8(FlagDrain) }, ErrHeader},
		{"reserved", func(b []byte) { b[35] = 1 }, ErrReserved},
		{"oversize", func(b []byte) { binary.LittleEndian.PutUint32(b[28:], MaxPayload+1) }, ErrTooLarge},
		{"oversize for type", func(b []byte) { binary.LittleEndian.PutUint32(b[28:], uint32(TypeTask.MaxPayload()+1)) }, ErrTooLarge},
		{"session 0", func(b []byte) { binary.LittleEndian.PutUint64(b[8:], 0) }, ErrHeader},
		{"seq 0 on a request", func(b []byte) { binary.LittleEndian.PutUint64(b[20:], 0) }, ErrHeader},
	}
	for _, c := range cases {
		b := EncodeHeader(goodHeader())
		c.change(b[:])
		if _, err := DecodeHeader(b[:]); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// Per-type session and sequence rules.
	rules := []Header{
		{Version: ProtocolVersion, Type: TypeChallenge, Session: 1},
		{Version: ProtocolVersion, Type: TypeChallenge, Worker: 1},
		{Version: ProtocolVersion, Type: TypeChallenge, Seq: 1},
		{Version: ProtocolVersion, Type: TypeJoin, Session: 1},
		{Version: ProtocolVersion, Type: TypeJoin, Worker: 1},
		{Version: ProtocolVersion, Type: TypeJoin, Seq: 1},
		{Version: ProtocolVersion, Type: TypeHello, Seq: 1, Session: 1},
		{Version: ProtocolVersion, Type: TypeHello},
		{Version: ProtocolVersion, Type: TypeHelloReply, Session: 1, Seq: 2},
		{Version: ProtocolVersion, Type: TypeShutdown, Session: 1, Seq: 2},
		{Version: ProtocolVersion, Type: TypeCompletion, Session: 1},
		{Version: ProtocolVersion, Type: TypeHealthReply, Seq: 1},
	}
	for _, h := range rules {
		b := EncodeHeader(h)
		if _, err := DecodeHeader(b[:]); !errors.Is(err, ErrHeader) {
			t.Errorf("%v: %v, want ErrHeader", h, err)
		}
	}
	b := EncodeHeader(goodHeader())
	if _, err := DecodeHeader(b[:HeaderSize-1]); !errors.Is(err, ErrTruncated) {
		t.Errorf("short header: %v", err)
	}
	if _, err := DecodeHeader(append(b[:], 0)); !errors.Is(err, ErrTrailing) {
		t.Errorf("long header: %v", err)
	}
	// A frame of another version still shows its fields, so a daemon can
	// refuse it by name.
	h := goodHeader()
	h.Version = 9
	b = EncodeHeader(h)
	got, err := DecodeHeader(b[:])
	if !errors.Is(err, ErrVersion) || got != h || !strings.Contains(err.Error(), "version 9") {
		t.Errorf("version 9: %+v, %v", got, err)
	}
}

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16+5) // > readChunk, not a multiple
	frames := []struct {
		h Header
		p []byte
	}{
		{Header{Version: ProtocolVersion, Type: TypeChallenge}, Payload(&Challenge{Nonce: nonce(3)})},
		{Header{Version: ProtocolVersion, Type: TypeHello, Session: 77, Worker: 2}, Payload(sampleHello())},
		{Header{Version: ProtocolVersion, Type: TypeControl, Session: 77, Worker: 2, Seq: 1}, Payload(&Control{Cmd: CmdCopyTo, Buffer: BufferRef{1, 1}, Data: big})},
		{Header{Version: ProtocolVersion, Type: TypeHealth, Session: 77, Worker: 2, Seq: 2}, Payload(&Health{Timestamp: 5})},
		{Header{Version: ProtocolVersion, Type: TypeShutdown, Session: 77, Worker: 2, Flags: FlagDrain}, nil},
	}
	for _, f := range frames {
		if err := WriteFrame(&buf, f.h, f.p); err != nil {
			t.Fatalf("write %s: %v", f.h.Type, err)
		}
	}
	for _, f := range frames {
		h, p, err := ReadFrame(&buf, 0)
		if err != nil {
			t.Fatalf("read %s: %v", f.h.Type, err)
		}
		f.h.Length = uint32(len(f.p))
		if h != f.h || !bytes.Equal(p, f.p) {
			t.Fatalf("%s: got %v (%d bytes)", f.h.Type, h, len(p))
		}
	}
	if _, _, err := ReadFrame(&buf, 0); err != io.EOF {
		t.Fatalf("clean end: %v, want io.EOF", err)
	}
}

func TestReadFrameTruncated(t *testing.T) {
	var buf bytes.Buffer
	payload := Payload(sampleTask())
	if err := WriteFrame(&buf, goodHeader(), payload); err != nil {
		t.Fatal(err)
	}
	whole := buf.Bytes()
	for _, n := range []int{1, HeaderSize - 1, HeaderSize, HeaderSize + 1, len(whole) - 1} {
		_, _, err := ReadFrame(bytes.NewReader(whole[:n]), 0)
		if !errors.Is(err, ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut at %d: %v, want truncated", n, err)
			continue
		}
		want := "frame header"
		if n >= HeaderSize {
			want = "TASK payload"
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("cut at %d: %q does not name the %s", n, err, want)
		}
	}
}

// A large frame cut short: the reader allocates as bytes arrive.
func TestReadFrameTruncatedLarge(t *testing.T) {
	h := Header{Version: ProtocolVersion, Type: TypeControl, Session: 1, Seq: 1, Length: MaxPayload}
	hb := EncodeHeader(h)
	r := io.MultiReader(bytes.NewReader(hb[:]), bytes.NewReader(make([]byte, 3*readChunk+7)))
	_, _, err := ReadFrame(r, 0)
	if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "got 3145735 of") {
		t.Fatalf("got %v", err)
	}
}

func TestReadFrameLimits(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFrame(&buf, goodHeader(), make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadFrame(bytes.NewReader(buf.Bytes()), 99); !errors.Is(err, ErrTooLarge) {
		t.Errorf("maxPayload 99: %v", err)
	}
	if _, _, err := ReadFrame(bytes.NewReader(buf.Bytes()), 100); err != nil {
		t.Errorf("maxPayload 100: %v", err)
	}
	b := EncodeHeader(goodHeader())
	copy(b[:], "SSH-")
	if _, _, err := ReadFrame(bytes.NewReader(b[:]), 0); !errors.Is(err, ErrMagic) || strings.Contains(err.Error(), "SSH") {
		t.Errorf("bad magic: %v (want ErrMagic, not echoing what was read)", err)
	}
}

func TestWriteFrameChecks(t *testing.T) {
	var buf bytes.Buffer
	bad := []Header{
		{Type: TypeTask, Session: 1, Seq: 1},                           // version 0
		{Version: ProtocolVersion, Type: 0, Session: 1, Seq: 1},        // no type
		{Version: ProtocolVersion, Type: TypeTask, Session: 1},         // seq 0
		{Version: ProtocolVersion, Type: TypeTask, Seq: 1, Flags: 0x2}, // unknown flag
	}
	for _, h := range bad {
		if err := WriteFrame(&buf, h, nil); err == nil {
			t.Errorf("%v: written", h)
		}
	}
	if err := WriteFrame(&buf, Header{Version: ProtocolVersion, Type: TypeHealth, Session: 1, Seq: 1}, make([]byte, 5000)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversize health: %v", err)
	}
	if err := WriteFrame(&buf, Header{Version: ProtocolVersion, Type: TypeControl, Session: 1, Seq: 1}, make([]byte, MaxPayload+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversize control: %v", err)
	}
	if buf.Len() != 0 {
		t.Errorf("%d bytes written for refused frames", buf.Len())
	}
}

func TestStrings(t *testing.T) {
	if TypeHelloReply.String() != "HELLO_REPLY" || Type(99).String() != "Type(99)" {
		t.Error("Type.String")
	}
	if CmdMalloc.String() != "REMOTE_MALLOC" || Command(0).String() != "Command(0)" {
		t.Error("Command.String")
	}
	if AccessReadWrite.String() != "readwrite" || TagOutputExisting.String() != "OUTPUT_EXISTING" {
		t.Error("Access/Tag.String")
	}
}
