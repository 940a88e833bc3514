package wire

import (
	"fmt"
	"strings"
)

// Bounds of the remote protocol's fields. A decoder refuses anything
// beyond them (ErrBounds); docs/protocol.md lists them with their fields.
const (
	MaxCopy        = 64 << 20 // bytes of one COPY_TO / COPY_FROM
	MaxInline      = 1 << 20  // bytes of one host_inline tensor
	MaxInlineTotal = 8 << 20  // inline bytes of one TASK
	MaxTensors     = 4096     // tensors of one TASK
	MaxScalars     = 4096     // scalars of one TASK
	MaxDims        = 16       // dimensions of a tensor
	MaxDim         = 1 << 40  // one dimension
	MaxBufferBytes = 1 << 40  // a remote buffer, an offset into one, a tensor's bytes
	MaxBlockDim    = 1 << 20  // CallConfig.BlockDim and AicpuThreadNum
	MaxDigest      = 128      // a callable digest, "sha256:..."
	MaxIdent       = 64       // a platform, comm profile or error kind
	MaxName        = 4096     // a module or function name, a worker path, a callable
	MaxMessage     = 64 << 10 // an error message
	MaxDevices     = 4096     // device ids (and global ranks) of a node
	MaxDeviceID    = 1 << 20  // a device id, a global device rank
	MaxSubWorkers  = 1 << 16  // num_sub_workers
	MaxModules     = 4096     // modules in a bundle
	MaxBundle      = 32 << 20 // source bytes of all modules in a bundle
	MaxExportToken = 64       // an export id (ExportIDSize bytes in this version)
	MaxHello       = 72 << 10 // a HELLO payload: the proof and the manifest, never code
	MaxJoin        = 40 << 10 // a JOIN payload: a rank's proof and announcement
	MaxHostName    = 255      // a host's name in a JOIN or HELLO_REPLY
	MaxGroupRanks  = 4096     // ranks of a worker group
	MaxRanks       = 4096     // ranks of a global domain
	MaxWindow      = 1 << 40  // a domain's window size
	MaxDomainTable = 4 << 20  // a domain descriptor table
	MaxStage       = 8 << 20  // bytes of one STAGE_TO / STAGE_FROM
	MaxReason      = 1 << 10  // a SHUTDOWN reason
	MaxTaskID      = 1 << 40  // a task id in a failure
	DigestPrefix   = "sha256:"
	minTensorSize  = 1 + 1 + 4 + 1 // tag, dtype, ndims, where
	minModuleSize  = 4 + 4         // name and source lengths
	minDomainRank  = 8
)

// Message is a payload codec: every message type of this package.
type Message interface{ Encode(*Encoder) }

// Payload encodes m into a fresh byte slice.
func Payload(m Message) []byte {
	// Room for the usual message at once: growing from nothing took a
	// handful of allocations per command on the global-domain path.
	e := Encoder{b: make([]byte, 0, 256)}
	m.Encode(&e)
	return e.Bytes()
}

// Tag says how a task uses a tensor. engine.Tag is this type, so the
// values a task carries across a process or a host are the engine's by
// construction.
type Tag uint8

// The tensor tags.
const (
	TagInput Tag = iota
	TagOutput
	TagInOut
	TagOutputExisting
	TagNoDep
	numTags
)

var tagNames = [...]string{"INPUT", "OUTPUT", "INOUT", "OUTPUT_EXISTING", "NO_DEP"}

func (t Tag) String() string {
	if t < numTags {
		return tagNames[t]
	}
	return fmt.Sprintf("Tag(%d)", uint8(t))
}

// Valid reports whether t is one of the tags above.
func (t Tag) Valid() bool { return t < numTags }

// Reads reports whether a task with this tag waits for the tensor's last
// writer: INPUT and INOUT.
func (t Tag) Reads() bool { return t == TagInput || t == TagInOut }

// Writes reports whether a task with this tag becomes the tensor's writer:
// OUTPUT, INOUT and OUTPUT_EXISTING (NO_DEP neither reads nor writes for
// dependencies).
func (t Tag) Writes() bool { return t == TagOutput || t == TagInOut || t == TagOutputExisting }

// Needs is the access a tag requires of a remote buffer (as the engine's
// registry checks it): INPUT reads, OUTPUT and OUTPUT_EXISTING write,
// INOUT and NO_DEP both.
func (t Tag) Needs() Access {
	switch t {
	case TagInput:
		return AccessRead
	case TagOutput, TagOutputExisting:
		return AccessWrite
	}
	return AccessReadWrite
}

// Access is what a remote buffer may be used for.
type Access uint8

// The access bits; any other bit is refused.
const (
	AccessRead      Access = 1
	AccessWrite     Access = 2
	AccessReadWrite        = AccessRead | AccessWrite
)

// Valid reports whether a is a non-empty set of known bits.
func (a Access) Valid() bool { return a != 0 && a&^AccessReadWrite == 0 }

func (a Access) String() string {
	switch a {
	case AccessRead:
		return "read"
	case AccessWrite:
		return "write"
	case AccessReadWrite:
		return "readwrite"
	}
	return fmt.Sprintf("Access(%d)", uint8(a))
}

// BufferRef names a remote buffer in one daemon's registry: its id and
// the generation that id was issued in (both non-zero), so a stale
// reference to a freed and reused id is refused rather than aliased.
type BufferRef struct {
	ID         uint64
	Generation uint64
}

func (r BufferRef) encode(e *Encoder) {
	e.U64(r.ID)
	e.U64(r.Generation)
}

func decodeBufferRef(d *Decoder) BufferRef {
	r := BufferRef{ID: d.U64(), Generation: d.U64()}
	if d.err == nil && (r.ID == 0 || r.Generation == 0) {
		d.FailBounds("buffer id %d generation %d: both must be non-zero", r.ID, r.Generation)
	}
	return r
}

// ErrorBody is an error as it crosses the wire: its kind ("ValueError",
// ...) and message, the two halves of an engine error's text.
type ErrorBody struct {
	Kind    string
	Message string
}

func (e *ErrorBody) Error() string { return e.Kind + ": " + e.Message }

func (e *ErrorBody) encode(enc *Encoder) {
	enc.String(e.Kind)
	enc.String(e.Message)
}

func decodeErrorBody(d *Decoder) *ErrorBody {
	return &ErrorBody{Kind: decodeKind(d), Message: d.StringMax(MaxMessage)}
}

// decodeKind reads an error kind: 1..MaxIdent letters, digits or '_'.
func decodeKind(d *Decoder) string {
	k := d.StringMax(MaxIdent)
	if d.err != nil {
		return ""
	}
	if k == "" {
		d.FailBounds("empty error kind")
		return ""
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			d.FailBounds("error kind %q: want letters, digits and '_'", k)
			return ""
		}
	}
	return k
}

// decodeIdent reads a platform or comm profile name: 0..MaxIdent of
// [A-Za-z0-9._-].
func decodeIdent(d *Decoder, what string) string {
	s := d.StringMax(MaxIdent)
	if d.err != nil {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			d.FailBounds("%s %q: want letters, digits, '.', '_' and '-'", what, s)
			return ""
		}
	}
	return s
}

// decodeDigest reads a callable digest: DigestPrefix and 1.. printable
// ASCII characters (no space), MaxDigest bytes in all.
func decodeDigest(d *Decoder) string {
	s := d.StringMax(MaxDigest)
	if d.err != nil {
		return ""
	}
	rest, ok := strings.CutPrefix(s, DigestPrefix)
	if !ok || rest == "" {
		d.FailBounds("callable digest %q: want %q and the digest", s, DigestPrefix)
		return ""
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; c <= ' ' || c > '~' {
			d.FailBounds("callable digest %q: want printable ASCII", s)
			return ""
		}
	}
	return s
}

// decodeName reads a non-empty string of at most MaxName bytes.
func decodeName(d *Decoder, what string) string {
	s := d.StringMax(MaxName)
	if d.err == nil && s == "" {
		d.FailBounds("empty %s", what)
	}
	return s
}

// decodeAccess reads an access byte; zero is allowed only where allowZero.
func decodeAccess(d *Decoder, allowZero bool) Access {
	a := Access(d.U8())
	if d.err == nil && !a.Valid() && !(allowZero && a == 0) {
		d.FailBounds("access %#x: want READ=1, WRITE=2 or both", uint8(a))
		return 0
	}
	return a
}
