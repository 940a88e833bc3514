// Package wiretest holds the canonical-encoding check that the fuzz
// targets of the engine's byte formats share: whatever decodes must
// re-encode to the same bytes. Only tests import it.
package wiretest

import (
	"bytes"
	"testing"

	"simpler/wire"
)

// A decoder under test: it returns, for bytes that decode, the encoder
// call that should write them back.
type DecodeFunc func(b []byte) (reencode func(e *wire.Encoder) error, err error)

// FuzzCanonical fuzzes decode from seeds, each of which must decode (a
// seed the decoder refuses would leave the canonical check unexercised):
// decoding must not panic, and whatever decodes must re-encode to the
// same bytes.
func FuzzCanonical(f *testing.F, seeds [][]byte, decode DecodeFunc) {
	for _, b := range seeds {
		if _, err := decode(b); err != nil {
			f.Fatalf("seed %x does not decode: %v", b, err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		reencode, err := decode(b)
		if err != nil {
			return
		}
		Canonical(t, b, reencode)
	})
}

// Canonical fails t unless encode writes b.
func Canonical(t *testing.T, b []byte, encode func(e *wire.Encoder) error) {
	t.Helper()
	var e wire.Encoder
	if err := encode(&e); err != nil {
		t.Fatalf("%x decodes but does not re-encode: %v", b, err)
	}
	if !bytes.Equal(e.Bytes(), b) {
		t.Fatalf("not canonical:\n  in  %x\n  out %x", b, e.Bytes())
	}
}
