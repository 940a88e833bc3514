// Package wire holds every byte format that crosses a process or a host:
// canonical little-endian encodings with explicit bounds. It is pure
// functions over bytes: no sockets, no engine internals.
//
// Encoder appends; Decoder reads and remembers the first error, so a
// message decodes with straight-line code and one check at the end.
// Decoders reject truncation, oversize lengths and trailing bytes; they
// never guess.
//
// Every encoding is canonical: a decoder accepts exactly the bytes its
// encoder produces for some value, so whatever decodes re-encodes to the
// same bytes. The remote L3 protocol built on this (frame header, message
// codecs, handshake) is described in docs/protocol.md.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MaxString bounds strings and byte fields inside a message.
const MaxString = 1 << 20

// The classes of decoding errors; test with errors.Is.
var (
	ErrTruncated = errors.New("truncated")      // fewer bytes than a field or frame needs
	ErrTrailing  = errors.New("trailing bytes") // bytes left after a complete message
	ErrBounds    = errors.New("out of bounds")  // a length, count, value or enum outside its bound
)

// wireError is an error of one of the classes above.
type wireError struct {
	msg   string
	class error
}

func (e *wireError) Error() string { return e.msg }
func (e *wireError) Unwrap() error { return e.class }

func errorf(class error, format string, args ...any) error {
	return &wireError{msg: "wire: " + fmt.Sprintf(format, args...), class: class}
}

// Encoder builds a message.
type Encoder struct{ b []byte }

// Reset empties the encoder, keeping its buffer.
func (e *Encoder) Reset() { e.b = e.b[:0] }

// Bytes is the message so far.
func (e *Encoder) Bytes() []byte { return e.b }

// Len is the number of bytes written so far.
func (e *Encoder) Len() int { return len(e.b) }

// U8 appends a byte.
func (e *Encoder) U8(v uint8) { e.b = append(e.b, v) }

// U16 appends a little-endian uint16.
func (e *Encoder) U16(v uint16) { e.b = binary.LittleEndian.AppendUint16(e.b, v) }

// U32 appends a little-endian uint32.
func (e *Encoder) U32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }

// U64 appends a little-endian uint64.
func (e *Encoder) U64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }

// I64 appends a two's-complement int64.
func (e *Encoder) I64(v int64) { e.U64(uint64(v)) }

// Int appends a non-negative int as a uint64.
func (e *Encoder) Int(v int) { e.U64(uint64(v)) }

// Bool appends 0 or 1.
func (e *Encoder) Bool(v bool) {
	if v {
		e.U8(1)
	} else {
		e.U8(0)
	}
}

// Raw appends bytes with no length prefix (a fixed-size field).
func (e *Encoder) Raw(v []byte) { e.b = append(e.b, v...) }

// Blob appends a length-prefixed byte string.
func (e *Encoder) Blob(v []byte) {
	e.U32(uint32(len(v)))
	e.b = append(e.b, v...)
}

// Message appends m's encoding as a blob (Blob(Payload(m))), written in
// place: its length is filled in once it is known.
func (e *Encoder) Message(m Message) {
	at := len(e.b)
	e.U32(0)
	m.Encode(e)
	binary.LittleEndian.PutUint32(e.b[at:], uint32(len(e.b)-at-4))
}

// String appends a length-prefixed string.
func (e *Encoder) String(v string) {
	e.U32(uint32(len(v)))
	e.b = append(e.b, v...)
}

// Decoder reads a message.
type Decoder struct {
	b   []byte
	off int
	err error
}

// NewDecoder reads b.
func NewDecoder(b []byte) *Decoder { return &Decoder{b: b} }

// Err is the first error met, if any.
func (d *Decoder) Err() error { return d.err }

// Offset is the number of bytes consumed so far.
func (d *Decoder) Offset() int { return d.off }

// Remaining is the number of bytes not yet consumed.
func (d *Decoder) Remaining() int { return len(d.b) - d.off }

// Fail records an error (the first one wins).
func (d *Decoder) Fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("wire: "+format, args...)
	}
}

// FailBounds records an out-of-bounds error (errors.Is(err, ErrBounds)).
func (d *Decoder) FailBounds(format string, args ...any) {
	if d.err == nil {
		d.err = errorf(ErrBounds, format, args...)
	}
}

// Finish reports the first error, or trailing bytes.
func (d *Decoder) Finish() error {
	if d.err == nil && d.off != len(d.b) {
		d.err = errorf(ErrTrailing, "%d trailing bytes after the message", len(d.b)-d.off)
	}
	return d.err
}

func (d *Decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.b)-d.off < n {
		d.err = errorf(ErrTruncated, "truncated: want %d bytes at offset %d, have %d", n, d.off, len(d.b)-d.off)
		return nil
	}
	p := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return p
}

// Rest reads every byte not yet consumed, without copying: the result
// aliases the decoder's input. A message whose result follows a prefix
// another layer reads (a mailbox reply's status) is decoded from it.
func (d *Decoder) Rest() []byte {
	if d.err != nil {
		return nil
	}
	return d.take(len(d.b) - d.off)
}

// U8 reads a byte.
func (d *Decoder) U8() uint8 {
	p := d.take(1)
	if p == nil {
		return 0
	}
	return p[0]
}

// U16 reads a little-endian uint16.
func (d *Decoder) U16() uint16 {
	p := d.take(2)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(p)
}

// U32 reads a little-endian uint32.
func (d *Decoder) U32() uint32 {
	p := d.take(4)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(p)
}

// U64 reads a little-endian uint64.
func (d *Decoder) U64() uint64 {
	p := d.take(8)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(p)
}

// I64 reads an int64.
func (d *Decoder) I64() int64 { return int64(d.U64()) }

// Int reads an int no larger than max.
func (d *Decoder) Int(max int) int {
	v := d.U64()
	if v > uint64(max) {
		d.FailBounds("value %d exceeds its bound %d", v, max)
		return 0
	}
	return int(v)
}

// Bool reads 0 or 1; anything else is an error.
func (d *Decoder) Bool() bool {
	switch d.U8() {
	case 0:
		return false
	case 1:
		return true
	}
	if d.err == nil {
		d.FailBounds("bad bool at offset %d", d.off-1)
	}
	return false
}

// Raw reads n bytes with no length prefix (a copy).
func (d *Decoder) Raw(n int) []byte {
	p := d.take(n)
	if p == nil {
		return nil
	}
	return append([]byte(nil), p...)
}

// length reads a u32 length prefix bounded by max, checking that the bytes
// it announces are there before anyone allocates for them.
func (d *Decoder) length(max int, what string) (int, bool) {
	n := d.U32()
	if d.err != nil {
		return 0, false
	}
	if int64(n) > int64(max) {
		d.FailBounds("%s of %d bytes exceeds its bound %d", what, n, max)
		return 0, false
	}
	if int(n) > len(d.b)-d.off {
		d.err = errorf(ErrTruncated, "truncated: %s of %d bytes at offset %d, have %d", what, n, d.off, len(d.b)-d.off)
		return 0, false
	}
	return int(n), true
}

// Blob reads a length-prefixed byte string (a copy) of at most max bytes.
func (d *Decoder) Blob(max int) []byte {
	n, ok := d.length(max, "field")
	if !ok {
		return nil
	}
	return append([]byte(nil), d.take(n)...)
}

// BlobRef reads a length-prefixed byte string of at most max bytes without
// copying: the result aliases the decoder's input, and is empty but not nil
// for a zero length.
func (d *Decoder) BlobRef(max int) []byte {
	n, ok := d.length(max, "field")
	if !ok {
		return nil
	}
	return d.take(n)
}

// String reads a length-prefixed string of at most MaxString bytes.
func (d *Decoder) String() string { return d.StringMax(MaxString) }

// StringMax reads a length-prefixed string of at most max bytes.
func (d *Decoder) StringMax(max int) string {
	n, ok := d.length(max, "string")
	if !ok {
		return ""
	}
	return string(d.take(n))
}

// Count reads a u32 element count of at most max, each element taking at
// least minSize bytes (≥ 1) of what remains: a count the input cannot hold
// is truncation, found before anything is allocated for it.
func (d *Decoder) Count(max, minSize int) int {
	n := d.U32()
	if d.err != nil {
		return 0
	}
	if int64(n) > int64(max) {
		d.FailBounds("count %d exceeds its bound %d", n, max)
		return 0
	}
	if minSize < 1 {
		minSize = 1
	}
	if int64(n)*int64(minSize) > int64(len(d.b)-d.off) {
		d.err = errorf(ErrTruncated, "truncated: %d elements of at least %d bytes at offset %d, have %d", n, minSize, d.off, len(d.b)-d.off)
		return 0
	}
	return int(n)
}
