package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// The frame header: HeaderSize bytes, little-endian, in this order.
//
//	offset size field
//	0      4    magic "SMPL"
//	4      2    version (ProtocolVersion)
//	6      1    frame type
//	7      1    flags
//	8      8    session id
//	16     4    worker id
//	20     8    sequence
//	28     4    payload length
//	32     4    reserved, zero
const HeaderSize = 36

// Magic opens every frame.
const Magic = "SMPL"

// ProtocolVersion is the only version this build speaks. Version 2 moved
// the code out of HELLO (a BUNDLE command after READY), so that a daemon
// checks the proof before it reads anything large, and bound the proof to
// the parent's id. Version 3 added the reversed direction (a rank dials
// its level-4 worker: JOIN, with mutual proofs) and the node's host in an
// accepted HELLO_REPLY. Version 4 added OUTPUT (what a node's code
// prints) and the spans of a COMPLETION (what the node did, for traces).
// Version 5 added a COMPLETION's race count (whether the node runs a
// --race detector, and what it found so far).
const ProtocolVersion uint16 = 5

// MaxPayload bounds any frame's payload: a 64 MiB bulk copy (MaxCopy) plus
// its command fields fits in one frame, so copies are never chunked inside
// the protocol; a larger copy is several COPY_TO / COPY_FROM commands.
const MaxPayload = MaxCopy + 64<<10

// The header's error classes (besides ErrTruncated and ErrBounds); test with
// errors.Is.
var (
	ErrMagic    = errors.New("bad magic")
	ErrVersion  = errors.New("unknown protocol version")
	ErrType     = errors.New("unknown frame type")
	ErrFlags    = errors.New("unknown flag bits")
	ErrReserved = errors.New("reserved field not zero")
	ErrTooLarge = errors.New("payload too large")
	ErrHeader   = errors.New("bad header field") // a session, sequence or flag the frame type forbids
)

// Type is a frame type.
type Type uint8

// The frame types. The parent (L4) sends HELLO, TASK, CONTROL, HEALTH and
// SHUTDOWN; the daemon sends CHALLENGE, HELLO_REPLY (the READY),
// COMPLETION, CONTROL_REPLY, HEALTH_REPLY, OUTPUT and SHUTDOWN. On a connection a
// rank dialled (docs/protocol.md, "Ranks that dial in") the parent sends
// the CHALLENGE and the rank answers with JOIN before the HELLO.
const (
	TypeChallenge    Type = iota + 1 // daemon → parent: the nonce (Challenge)
	TypeHello                        // parent → daemon: manifest, bundle, proof (Hello)
	TypeHelloReply                   // daemon → parent: accepted or refused (HelloReply)
	TypeTask                         // parent → daemon: run a callable (Task)
	TypeCompletion                   // daemon → parent: a task finished (Completion)
	TypeControl                      // parent → daemon: one command (Control)
	TypeControlReply                 // daemon → parent: its result (ControlReply)
	TypeHealth                       // parent → daemon: a probe (Health)
	TypeHealthReply                  // daemon → parent: its answer (HealthReply)
	TypeShutdown                     // either way: the session ends (Shutdown)
	TypeJoin                         // rank → parent, on a connection the rank dialled: its proof and announcement (Join)
	TypeOutput                       // daemon → parent: a line the node's code printed (Output)
	numTypes
)

var typeNames = [...]string{
	TypeChallenge:    "CHALLENGE",
	TypeHello:        "HELLO",
	TypeHelloReply:   "HELLO_REPLY",
	TypeTask:         "TASK",
	TypeCompletion:   "COMPLETION",
	TypeControl:      "CONTROL",
	TypeControlReply: "CONTROL_REPLY",
	TypeHealth:       "HEALTH",
	TypeHealthReply:  "HEALTH_REPLY",
	TypeShutdown:     "SHUTDOWN",
	TypeJoin:         "JOIN",
	TypeOutput:       "OUTPUT",
}

// Valid reports whether t is a known frame type.
func (t Type) Valid() bool { return t > 0 && t < numTypes }

func (t Type) String() string {
	if t.Valid() {
		return typeNames[t]
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// MaxPayload is the largest payload a frame of type t may carry: no
// valid message of that type encodes larger, so a header announcing more
// is refused before anything is read or allocated.
func (t Type) MaxPayload() int {
	switch t {
	case TypeChallenge:
		return ChallengeSize
	case TypeHealth, TypeHealthReply, TypeShutdown:
		return 4 << 10
	case TypeHelloReply, TypeCompletion:
		return 128 << 10
	case TypeTask:
		return 16 << 20
	case TypeHello:
		return MaxHello
	case TypeJoin:
		return MaxJoin
	case TypeOutput:
		return MaxOutputLine + 16
	case TypeControl, TypeControlReply:
		return MaxPayload
	}
	return 0
}

// Flags are a frame's flag bits.
type Flags uint8

// The known flags; any other bit is refused.
const (
	// FlagDrain, on SHUTDOWN only: finish the tasks and the command in
	// flight and send their replies before closing. Without it the
	// receiver fails whatever is in flight and closes at once.
	FlagDrain Flags = 1 << 0

	// KnownFlags is every flag bit this version defines.
	KnownFlags = FlagDrain
)

// allowedFlags is which known flags each frame type may carry.
func (t Type) allowedFlags() Flags {
	if t == TypeShutdown {
		return FlagDrain
	}
	return 0
}

// Header is a decoded frame header (the reserved field is always zero).
type Header struct {
	Version uint16 // ProtocolVersion
	Type    Type
	Flags   Flags
	Session uint64 // chosen by the parent at HELLO; 0 only on CHALLENGE and JOIN
	Worker  uint32 // the parent's NEXT_LEVEL id for the node; 0 on CHALLENGE and JOIN
	Seq     uint64 // a request's number, or the number of the request a reply answers
	Length  uint32 // payload bytes
}

func (h Header) String() string {
	return fmt.Sprintf("%s frame (version %d, flags %#x, session %#x, worker %d, seq %d, %d payload bytes)",
		h.Type, h.Version, uint8(h.Flags), h.Session, h.Worker, h.Seq, h.Length)
}

// EncodeHeader writes h as it is, without checking it (Check does;
// WriteFrame does both).
func EncodeHeader(h Header) [HeaderSize]byte {
	var b [HeaderSize]byte
	copy(b[0:4], Magic)
	binary.LittleEndian.PutUint16(b[4:], h.Version)
	b[6] = uint8(h.Type)
	b[7] = uint8(h.Flags)
	binary.LittleEndian.PutUint64(b[8:], h.Session)
	binary.LittleEndian.PutUint32(b[16:], h.Worker)
	binary.LittleEndian.PutUint64(b[20:], h.Seq)
	binary.LittleEndian.PutUint32(b[28:], h.Length)
	return b
}

// DecodeHeader reads exactly HeaderSize bytes and checks them (see Check).
// Past the magic, the fields are returned even when a check fails, so a
// daemon can answer a frame of another version with a refusal naming it.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) != HeaderSize {
		if len(b) < HeaderSize {
			return Header{}, errorf(ErrTruncated, "truncated frame header: %d of %d bytes", len(b), HeaderSize)
		}
		return Header{}, errorf(ErrTrailing, "frame header of %d bytes, want %d", len(b), HeaderSize)
	}
	if string(b[0:4]) != Magic {
		// The bytes are not echoed: whatever answered may be another
		// service, and an error must not carry what it said.
		return Header{}, errorf(ErrMagic, "bad magic, want %q: not a simpler frame", Magic)
	}
	h := Header{
		Version: binary.LittleEndian.Uint16(b[4:]),
		Type:    Type(b[6]),
		Flags:   Flags(b[7]),
		Session: binary.LittleEndian.Uint64(b[8:]),
		Worker:  binary.LittleEndian.Uint32(b[16:]),
		Seq:     binary.LittleEndian.Uint64(b[20:]),
		Length:  binary.LittleEndian.Uint32(b[28:]),
	}
	if r := binary.LittleEndian.Uint32(b[32:]); r != 0 {
		return h, errorf(ErrReserved, "reserved header field is %#x, want 0", r)
	}
	return h, h.Check()
}

// Check enforces the header rules: the version is ProtocolVersion, the type
// is known, no unknown flag bits (and only flags the type allows), the
// length within MaxPayload and the type's own bound, and the per-type
// session and sequence rules of docs/protocol.md:
//
//	CHALLENGE, JOIN                    session 0, worker 0, seq 0
//	HELLO, HELLO_REPLY, SHUTDOWN,
//	OUTPUT                             session ≠ 0, seq 0
//	TASK, CONTROL, HEALTH              session ≠ 0, seq ≠ 0
//	COMPLETION, CONTROL_REPLY,
//	HEALTH_REPLY                       session ≠ 0, seq ≠ 0 (the request's)
func (h Header) Check() error {
	if h.Version != ProtocolVersion {
		return errorf(ErrVersion, "frame has protocol version %d, this build speaks %d", h.Version, ProtocolVersion)
	}
	if !h.Type.Valid() {
		return errorf(ErrType, "unknown frame type %d", uint8(h.Type))
	}
	if unknown := h.Flags &^ KnownFlags; unknown != 0 {
		return errorf(ErrFlags, "%s frame has unknown flag bits %#x", h.Type, uint8(unknown))
	}
	if bad := h.Flags &^ h.Type.allowedFlags(); bad != 0 {
		return errorf(ErrHeader, "%s frame may not carry flags %#x", h.Type, uint8(bad))
	}
	if int64(h.Length) > MaxPayload {
		return errorf(ErrTooLarge, "%s frame announces %d payload bytes, the bound is %d", h.Type, h.Length, MaxPayload)
	}
	if max := h.Type.MaxPayload(); int64(h.Length) > int64(max) {
		return errorf(ErrTooLarge, "%s frame announces %d payload bytes, its bound is %d", h.Type, h.Length, max)
	}
	switch h.Type {
	case TypeChallenge, TypeJoin:
		if h.Session != 0 || h.Worker != 0 || h.Seq != 0 {
			return errorf(ErrHeader, "%s frame must have session, worker and seq 0 (have %#x, %d, %d)", h.Type, h.Session, h.Worker, h.Seq)
		}
	case TypeHello, TypeHelloReply, TypeShutdown, TypeOutput:
		if h.Session == 0 {
			return errorf(ErrHeader, "%s frame has session 0", h.Type)
		}
		if h.Seq != 0 {
			return errorf(ErrHeader, "%s frame has seq %d, want 0", h.Type, h.Seq)
		}
	default:
		if h.Session == 0 {
			return errorf(ErrHeader, "%s frame has session 0", h.Type)
		}
		if h.Seq == 0 {
			return errorf(ErrHeader, "%s frame has seq 0", h.Type)
		}
	}
	return nil
}

// readChunk is how much of a large payload ReadFrame allocates ahead of the
// bytes actually arriving: a peer that announces 64 MiB and sends nothing
// costs 1 MiB, not 64.
const readChunk = 1 << 20

// ReadFrame reads one frame: its header (checked) and payload. maxPayload
// lowers the bound for this read (≤ 0 means MaxPayload); a daemon passes a
// small one until the handshake is done. A clean end of stream before any
// header byte is io.EOF itself; any other short read is ErrTruncated
// naming what was cut (header or which payload) and wrapping
// io.ErrUnexpectedEOF. The payload is freshly allocated, owned by the
// caller.
func ReadFrame(r io.Reader, maxPayload int) (Header, []byte, error) {
	return readFrame(r, maxPayload, nil)
}

func readFrame(r io.Reader, maxPayload int, buf []byte) (Header, []byte, error) {
	h, err := ReadHeader(r, maxPayload)
	if err != nil {
		return h, nil, err
	}
	p, err := ReadPayload(r, h, buf)
	return h, p, err
}

// ReadHeader reads and checks one frame header: the first half of
// ReadFrame, for a reader that places some payloads itself (a bulk copy
// read straight into its destination). maxPayload is as for ReadFrame.
func ReadHeader(r io.Reader, maxPayload int) (Header, error) {
	var hb [HeaderSize]byte
	if n, err := io.ReadFull(r, hb[:]); err != nil {
		if err == io.EOF {
			return Header{}, io.EOF
		}
		if err == io.ErrUnexpectedEOF {
			return Header{}, &wireError{
				msg:   fmt.Sprintf("wire: truncated frame header: got %d of %d bytes", n, HeaderSize),
				class: errors.Join(ErrTruncated, io.ErrUnexpectedEOF),
			}
		}
		return Header{}, fmt.Errorf("wire: reading a frame header: %w", err)
	}
	h, err := DecodeHeader(hb[:])
	if err != nil {
		return h, err
	}
	if maxPayload <= 0 || maxPayload > MaxPayload {
		maxPayload = MaxPayload
	}
	if int64(h.Length) > int64(maxPayload) {
		return h, errorf(ErrTooLarge, "%s frame announces %d payload bytes, this read allows %d", h.Type, h.Length, maxPayload)
	}
	return h, nil
}

// ReadPayload reads h's payload, into buf when it is big enough.
func ReadPayload(r io.Reader, h Header, buf []byte) ([]byte, error) {
	n := int(h.Length)
	if cap(buf) >= n {
		p := buf[:n]
		if k, err := io.ReadFull(r, p); err != nil {
			return nil, truncated(h, k, n, err)
		}
		return p, nil
	}
	p := make([]byte, 0, min(n, readChunk))
	for len(p) < n {
		if len(p) == cap(p) {
			p = slices.Grow(p, min(n-len(p), len(p))) // doubling as bytes arrive
		}
		k, err := io.ReadFull(r, p[len(p):min(n, cap(p))])
		p = p[:len(p)+k]
		if err != nil {
			return nil, truncated(h, len(p), n, err)
		}
	}
	return p, nil
}

// truncated describes a payload read that ended after got of want bytes.
func truncated(h Header, got, want int, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return &wireError{
			msg:   fmt.Sprintf("wire: truncated %s payload: got %d of %d bytes", h.Type, got, want),
			class: errors.Join(ErrTruncated, io.ErrUnexpectedEOF),
		}
	}
	return fmt.Errorf("wire: reading a %s payload: %w", h.Type, err)
}

// WriteFrame writes one frame: h with its Length set to len(payload),
// checked, then the payload, in a single Write when the payload is small
// and two otherwise (callers serialise writers on a connection).
func WriteFrame(w io.Writer, h Header, payload []byte) error {
	if int64(len(payload)) > int64(MaxPayload) {
		return errorf(ErrTooLarge, "%s payload of %d bytes exceeds the bound %d", h.Type, len(payload), MaxPayload)
	}
	h.Length = uint32(len(payload))
	if err := h.Check(); err != nil {
		return err
	}
	hb := EncodeHeader(h)
	if len(payload) <= 64<<10 {
		buf := make([]byte, 0, HeaderSize+len(payload))
		buf = append(append(buf, hb[:]...), payload...)
		_, err := w.Write(buf)
		return err
	}
	if _, err := w.Write(hb[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}
