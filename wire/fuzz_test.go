package wire

import (
	"bytes"
	"testing"
)

func FuzzDecodeHeader(f *testing.F) {
	for typ := TypeChallenge; typ.Valid(); typ++ {
		h := Header{Version: ProtocolVersion, Type: typ, Session: 1, Worker: 2, Seq: 3, Length: 4}
		switch typ {
		case TypeChallenge, TypeJoin:
			h = Header{Version: ProtocolVersion, Type: typ, Length: ChallengeSize}
		case TypeHello, TypeHelloReply, TypeShutdown:
			h.Seq = 0
		}
		b := EncodeHeader(h)
		f.Add(b[:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHeader(b)
		if err != nil {
			return
		}
		if got := EncodeHeader(h); !bytes.Equal(got[:], b) {
			t.Fatalf("not canonical: %x → %+v → %x", b, h, got)
		}
		if h.Check() != nil {
			t.Fatalf("decoded header fails Check: %+v", h)
		}
	})
}

// FuzzReadFrame: whatever frame reads writes back to the bytes it consumed.
func FuzzReadFrame(f *testing.F) {
	for _, s := range samples() {
		var buf bytes.Buffer
		h := Header{Version: ProtocolVersion, Type: TypeControl, Session: 1, Worker: 2, Seq: 3}
		if err := WriteFrame(&buf, h, Payload(s.msg)); err == nil {
			f.Add(buf.Bytes())
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		h, p, err := ReadFrame(r, 1<<16)
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := WriteFrame(&out, h, p); err != nil {
			t.Fatalf("a frame that read does not write: %v", err)
		}
		if consumed := b[:len(b)-r.Len()]; !bytes.Equal(out.Bytes(), consumed) {
			t.Fatalf("not canonical: %x → %x", consumed, out.Bytes())
		}
	})
}

func fuzzDecoder(f *testing.F, decode func([]byte) (Message, error)) {
	seed(f, decode)
	f.Fuzz(func(t *testing.T, b []byte) { canonical(t, b, decode) })
}

func FuzzDecodeChallenge(f *testing.F)    { fuzzDecoder(f, decChallenge) }
func FuzzDecodeHello(f *testing.F)        { fuzzDecoder(f, decHello) }
func FuzzDecodeHelloReply(f *testing.F)   { fuzzDecoder(f, decHelloReply) }
func FuzzDecodeTask(f *testing.F)         { fuzzDecoder(f, decTask) }
func FuzzDecodeCompletion(f *testing.F)   { fuzzDecoder(f, decCompletion) }
func FuzzDecodeControl(f *testing.F)      { fuzzDecoder(f, decControl) }
func FuzzDecodeControlReply(f *testing.F) { fuzzDecoder(f, decControlReply) }
func FuzzDecodeHealth(f *testing.F)       { fuzzDecoder(f, decHealth) }
func FuzzDecodeHealthReply(f *testing.F)  { fuzzDecoder(f, decHealthReply) }
func FuzzDecodeShutdown(f *testing.F)     { fuzzDecoder(f, decShutdown) }
func FuzzDecodeOutput(f *testing.F)       { fuzzDecoder(f, decOutput) }
func FuzzDecodeJoin(f *testing.F)         { fuzzDecoder(f, decJoin) }
func FuzzDecodeExportID(f *testing.F)     { fuzzDecoder(f, decExportID) }
func FuzzDecodeLink(f *testing.F)         { fuzzDecoder(f, decLink) }
