package wire

import (
	"encoding/binary"
	"io"
)

// Bulk frames (a COPY_TO command, a COPY_FROM reply) end with their data.
// WriteBulk sends one without copying the data into an encoder, and
// ReadFrameInto reads into a buffer the caller reuses, so a 64 MiB copy
// costs one pass over the bytes on each side, not three, and no fresh
// memory (whose first touch is slow) per copy.

// WriteBulk writes a frame whose message m ends with a blob that is left
// empty in m; data follows as that blob's bytes. The bytes on the wire are
// exactly those of m with the blob set to data.
func WriteBulk(w io.Writer, h Header, m Message, data []byte) error {
	var e Encoder
	m.Encode(&e)
	head := e.Bytes()
	if len(head) < 4 || binary.LittleEndian.Uint32(head[len(head)-4:]) != 0 {
		return errorf(ErrBounds, "%s: a bulk message must end with an empty blob", h.Type)
	}
	binary.LittleEndian.PutUint32(head[len(head)-4:], uint32(len(data)))
	n := len(head) + len(data)
	if int64(n) > int64(MaxPayload) {
		return errorf(ErrTooLarge, "%s payload of %d bytes exceeds the bound %d", h.Type, n, MaxPayload)
	}
	h.Length = uint32(n)
	if err := h.Check(); err != nil {
		return err
	}
	hb := EncodeHeader(h)
	if _, err := w.Write(append(hb[:], head...)); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

// WriteMessage writes m (nil: an empty payload) as one frame with header
// h. A bulk that is not nil is m's trailing blob, written from where it
// lies (WriteBulk).
func WriteMessage(w io.Writer, h Header, m Message, bulk []byte) error {
	if bulk != nil {
		return WriteBulk(w, h, m, bulk)
	}
	var e Encoder
	if m != nil {
		m.Encode(&e)
	}
	return WriteFrame(w, h, e.Bytes())
}

// ReadFrameInto is ReadFrame reading the payload into buf when it is big
// enough (else into new memory); the payload aliases buf, so the caller
// must not reuse buf while the payload is in use.
func ReadFrameInto(r io.Reader, maxPayload int, buf []byte) (Header, []byte, error) {
	return readFrame(r, maxPayload, buf)
}

// The fixed part of each bulk message, before its data: a reader may
// decode it first and read the data straight into where it belongs.
const (
	// CopyToPrefixSize: command, buffer (id, generation), offset, data length.
	CopyToPrefixSize = 1 + 16 + 8 + 4
	// CopyFromReplyPrefixSize: sequence, command, status, data length.
	CopyFromReplyPrefixSize = 8 + 1 + 1 + 4
)

// DecodeCopyToPrefix reads the prefix of a CONTROL payload; ok is false
// unless it is a COPY_TO whose data is exactly the rest of the frame.
func DecodeCopyToPrefix(p []byte, frameLen int) (buf BufferRef, offset uint64, n int, ok bool) {
	if len(p) != CopyToPrefixSize || Command(p[0]) != CmdCopyTo {
		return BufferRef{}, 0, 0, false
	}
	d := NewDecoder(p[1:])
	buf = decodeBufferRef(d)
	offset = d.U64()
	n = int(d.U32())
	return buf, offset, n, d.Err() == nil && n > 0 && n <= MaxCopy && CopyToPrefixSize+n == frameLen
}

// DecodeCopyFromReplyPrefix reads the prefix of a CONTROL_REPLY payload;
// ok is false unless it is a successful COPY_FROM whose data is exactly
// the rest of the frame.
func DecodeCopyFromReplyPrefix(p []byte, frameLen int) (seq uint64, n int, ok bool) {
	if len(p) != CopyFromReplyPrefixSize {
		return 0, 0, false
	}
	d := NewDecoder(p)
	seq = d.U64()
	cmd, status := Command(d.U8()), d.U8()
	n = int(d.U32())
	return seq, n, d.Err() == nil && seq != 0 && cmd == CmdCopyFrom && status == statusOK && CopyFromReplyPrefixSize+n == frameLen
}
