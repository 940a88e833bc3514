// Package wire holds every byte format that crosses a process or a host:
// canonical little-endian encodings with explicit bounds. It is pure
// functions over bytes: no sockets, no engine internals.
//
// Encoder appends; Decoder reads and remembers the first error, so a
// message decodes with straight-line code and one check at the end.
// Decoders reject truncation, oversize lengths and trailing bytes; they
// never guess.
package wire

import (
	"encoding/binary"
	"fmt"
)

// MaxString bounds strings and byte fields inside a message.
const MaxString = 1 << 20

// Encoder builds a message.
type Encoder struct{ b []byte }

// Reset empties the encoder, keeping its buffer.
func (e *Encoder) Reset() { e.b = e.b[:0] }

// Bytes is the message so far.
func (e *Encoder) Bytes() []byte { return e.b }

// U8 appends a byte.
func (e *Encoder) U8(v uint8) { e.b = append(e.b, v) }

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

// Blob appends a length-prefixed byte string.
func (e *Encoder) Blob(v []byte) {
	e.U32(uint32(len(v)))
	e.b = append(e.b, v...)
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

// Fail records an error (the first one wins).
func (d *Decoder) Fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("wire: "+format, args...)
	}
}

// Finish reports the first error, or trailing bytes.
func (d *Decoder) Finish() error {
	if d.err == nil && d.off != len(d.b) {
		d.err = fmt.Errorf("wire: %d trailing bytes after the message", len(d.b)-d.off)
	}
	return d.err
}

func (d *Decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.b)-d.off < n {
		d.Fail("truncated: want %d bytes at offset %d, have %d", n, d.off, len(d.b)-d.off)
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

// U8 reads a byte.
func (d *Decoder) U8() uint8 {
	p := d.take(1)
	if p == nil {
		return 0
	}
	return p[0]
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
		d.Fail("value %d exceeds its bound %d", v, max)
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
	d.Fail("bad bool at offset %d", d.off-1)
	return false
}

// Blob reads a length-prefixed byte string (a copy) of at most max bytes.
func (d *Decoder) Blob(max int) []byte {
	n := d.U32()
	if int64(n) > int64(max) {
		d.Fail("field of %d bytes exceeds its bound %d", n, max)
		return nil
	}
	return append([]byte(nil), d.take(int(n))...)
}

// String reads a length-prefixed string of at most MaxString bytes.
func (d *Decoder) String() string {
	n := d.U32()
	if n > MaxString {
		d.Fail("string of %d bytes exceeds its bound %d", n, MaxString)
		return ""
	}
	return string(d.take(int(n)))
}
