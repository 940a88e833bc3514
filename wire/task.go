package wire

import (
	"fmt"

	"simpler/hal/dtype"
)

// CallConfig is the per-call configuration of a task.
type CallConfig struct {
	BlockDim        int // ≤ MaxBlockDim
	AicpuThreadNum  int // ≤ MaxBlockDim
	EnableProfiling bool
}

func (c CallConfig) encode(e *Encoder) {
	e.Int(c.BlockDim)
	e.Int(c.AicpuThreadNum)
	e.Bool(c.EnableProfiling)
}

func decodeCallConfig(d *Decoder) CallConfig {
	return CallConfig{BlockDim: d.Int(MaxBlockDim), AicpuThreadNum: d.Int(MaxBlockDim), EnableProfiling: d.Bool()}
}

// RemoteRef places a tensor in a remote buffer of the daemon that runs
// the task: Buffer is in that daemon's registry (for an imported buffer,
// the ref IMPORT returned there), Owner is the worker id of the node that
// owns the memory, Offset is in bytes, Access is what the task may do
// there and must cover the tag's Needs.
type RemoteRef struct {
	Owner  uint32
	Buffer BufferRef
	Offset uint64
	Access Access
}

// TensorArg is one tensor of a task: exactly one of Remote and Inline
// says where its bytes are (Encode takes Remote when it is set). Inline
// is a host_inline input carried in the frame: INPUT only, exactly the
// tensor's bytes.
type TensorArg struct {
	Tag    Tag
	DType  dtype.DType
	Shape  []int
	Remote *RemoteRef
	Inline []byte
}

// NBytes is the tensor's size in bytes, or -1 if it exceeds
// MaxBufferBytes.
func (t *TensorArg) NBytes() int64 { return tensorBytes(t.Shape, t.DType) }

func tensorBytes(shape []int, dt dtype.DType) int64 {
	n := int64(dt.Size())
	over := false
	for _, d := range shape {
		if d == 0 {
			return 0
		}
		if d < 0 || n > MaxBufferBytes/int64(d) {
			over = true // keep looking for a zero dimension
			continue
		}
		n *= int64(d)
	}
	if over || n > MaxBufferBytes {
		return -1
	}
	return n
}

// Where a tensor's bytes are: one value space for every message with
// tensors, so a tensor's bytes say what they are. A TASK carries remote
// and inline tensors, a mailbox task (MailboxTask) device and host ones.
const (
	whereRemote uint8 = 1
	whereInline uint8 = 2
	whereDevice uint8 = 3
	whereHost   uint8 = 4
)

// encodeTensorHead writes what every tensor starts with: tag, dtype and
// shape; the location byte and its body follow.
func encodeTensorHead(e *Encoder, tag Tag, dt dtype.DType, shape []int) {
	e.U8(uint8(tag))
	e.U8(uint8(dt))
	e.U32(uint32(len(shape)))
	for _, d := range shape {
		e.Int(d)
	}
}

// decodeTensorHead reads tensor i's head: a known tag and dtype and a
// shape whose bytes fit MaxBufferBytes, and returns those bytes.
func decodeTensorHead(d *Decoder, i int) (tag Tag, dt dtype.DType, shape []int, nbytes int64) {
	tag, dt = Tag(d.U8()), dtype.DType(d.U8())
	if d.err == nil && !tag.Valid() {
		d.FailBounds("tensor %d: unknown tag %d", i, uint8(tag))
	}
	if d.err == nil && dt.Size() == 0 {
		d.FailBounds("tensor %d: unknown dtype %d", i, uint8(dt))
	}
	nd := d.Count(MaxDims, 8)
	if nd > 0 {
		shape = make([]int, nd)
		for j := range shape {
			shape[j] = d.Int(MaxDim)
		}
	}
	if d.err != nil {
		return tag, dt, shape, 0
	}
	nbytes = tensorBytes(shape, dt)
	if nbytes < 0 {
		d.FailBounds("tensor %d: shape %v of %s exceeds %d bytes", i, shape, dt, int64(MaxBufferBytes))
	}
	return tag, dt, shape, nbytes
}

func encodeScalars(e *Encoder, scalars []uint64) {
	e.U32(uint32(len(scalars)))
	for _, s := range scalars {
		e.U64(s)
	}
}

// decodeScalars reads a task's scalars: nil when there are none.
func decodeScalars(d *Decoder) []uint64 {
	n := d.Count(MaxScalars, 8)
	if n == 0 {
		return nil
	}
	s := make([]uint64, n)
	for i := range s {
		s[i] = d.U64()
	}
	return s
}

// Task runs a registered callable on the node. The header's sequence
// numbers it; its COMPLETION carries the same number.
type Task struct {
	Digest  string // "sha256:...", registered on the daemon with REGISTER
	Config  CallConfig
	Tensors []TensorArg
	Scalars []uint64
}

// Encode writes the TASK payload.
func (t *Task) Encode(e *Encoder) {
	e.String(t.Digest)
	t.Config.encode(e)
	e.U32(uint32(len(t.Tensors)))
	for i := range t.Tensors {
		a := &t.Tensors[i]
		encodeTensorHead(e, a.Tag, a.DType, a.Shape)
		if r := a.Remote; r != nil {
			e.U8(whereRemote)
			e.U32(r.Owner)
			r.Buffer.encode(e)
			e.U64(r.Offset)
			e.U8(uint8(r.Access))
		} else {
			e.U8(whereInline)
			e.Blob(a.Inline)
		}
	}
	encodeScalars(e, t.Scalars)
}

// DecodeTask reads a TASK payload. Inline bytes alias b.
func DecodeTask(b []byte) (Task, error) {
	d := NewDecoder(b)
	var t Task
	t.Digest = decodeDigest(d)
	t.Config = decodeCallConfig(d)
	n := d.Count(MaxTensors, minTensorSize)
	if n > 0 {
		t.Tensors = make([]TensorArg, 0, n)
	}
	inline := 0
	for i := 0; i < n && d.err == nil; i++ {
		a := decodeTensor(d, i, &inline)
		t.Tensors = append(t.Tensors, a)
	}
	t.Scalars = decodeScalars(d)
	if err := d.Finish(); err != nil {
		return Task{}, err
	}
	return t, nil
}

func decodeTensor(d *Decoder, i int, inline *int) TensorArg {
	var a TensorArg
	var nbytes int64
	a.Tag, a.DType, a.Shape, nbytes = decodeTensorHead(d, i)
	if d.err != nil {
		return a
	}
	switch where := d.U8(); where {
	case whereRemote:
		r := &RemoteRef{Owner: d.U32(), Buffer: decodeBufferRef(d), Offset: d.U64(), Access: decodeAccess(d, false)}
		if d.err != nil {
			return a
		}
		if r.Offset > MaxBufferBytes-uint64(nbytes) {
			d.FailBounds("tensor %d: offset %d + %d bytes exceeds %d", i, r.Offset, nbytes, int64(MaxBufferBytes))
		} else if need := a.Tag.Needs(); r.Access&need != need {
			d.FailBounds("tensor %d: tag %s needs %s access, the descriptor grants %s", i, a.Tag, need, r.Access)
		}
		a.Remote = r
	case whereInline:
		if a.Tag != TagInput {
			d.FailBounds("tensor %d: an inline tensor is an INPUT, not %s", i, a.Tag)
			return a
		}
		a.Inline = d.BlobRef(MaxInline)
		if d.err != nil {
			return a
		}
		if int64(len(a.Inline)) != nbytes {
			d.FailBounds("tensor %d: %d inline bytes for shape %v of %s (%d bytes)", i, len(a.Inline), a.Shape, a.DType, nbytes)
		}
		*inline += len(a.Inline)
		if *inline > MaxInlineTotal {
			d.FailBounds("tensor %d: inline bytes of the task exceed %d", i, MaxInlineTotal)
		}
	default:
		if d.err == nil {
			d.FailBounds("tensor %d: unknown location %d (want 1 remote or 2 inline)", i, where)
		}
	}
	return a
}

// TaskFailure is why a task failed, mirroring engine.TaskError: the path
// down the worker tree where it failed (e.g. "chip_worker 0 (device 0)"),
// the task id there and its callable, and the error's kind and message.
// Path and Callable are empty for a failure before any task ran (an
// unknown digest, say).
type TaskFailure struct {
	Kind     string
	Message  string
	Path     string
	TaskID   uint64
	Callable string
	// NotStarted says the node took the task out of its queue on a
	// CANCEL before it ran: nothing of it ran (a cancel's report).
	NotStarted bool
}

func (f *TaskFailure) Error() string {
	if f.Path == "" {
		return f.Kind + ": " + f.Message
	}
	return fmt.Sprintf("%s: %s: task %d running %q failed: %s", f.Kind, f.Path, f.TaskID, f.Callable, f.Message)
}

// Completion reports a finished task: Err is nil on success. Took and
// Spans are what the node did for it, for the parent's trace: how long the
// task ran there, and its chip tasks (at most MaxSpans; the first ones
// when there were more), each placed by the node's clock relative to the
// task's start there.
type Completion struct {
	Seq   uint64 // the TASK frame's sequence (also the header's)
	Err   *TaskFailure
	Took  int64 // nanoseconds, 0..MaxSpanNanos
	Spans []Span
	Race  RaceCount // what the node's race detector found so far (version 5)
}

// RaceCount is what a node's --race detector says in each COMPLETION:
// whether the node checks at all (its daemon runs with --race), and the
// distinct races it reported so far, in every task of the session. The
// count only grows, so the parent keeps the latest; it is a number, not
// text the parent would have to match in the node's output.
type RaceCount struct {
	Checked bool
	Races   uint32 // ≤ MaxRaces; 0 when not checked
}

// MaxRaces bounds a RaceCount's races: a detector reports each pair of
// code locations once, so a real count stays far below it.
const MaxRaces = 1 << 30

// Span is one piece of work a node did for a task: a chip task (Lane
// names the chip's endpoint on the node) or the task's orchestration.
type Span struct {
	Lane     string // ≤ MaxSpanName bytes
	Callable string // ≤ MaxSpanName bytes
	Start    int64  // nanoseconds after the task started on the node, 0..MaxSpanNanos
	Dur      int64  // nanoseconds, 0..MaxSpanNanos
}

// Bounds of a COMPLETION's spans: with a maximal failure they fit its
// frame's bound.
const (
	MaxSpans     = 128
	MaxSpanName  = 96
	MaxSpanNanos = 1 << 62
)

// Encode writes the COMPLETION payload.
func (c *Completion) Encode(e *Encoder) {
	e.U64(c.Seq)
	if c.Err == nil {
		e.U8(statusOK)
	} else {
		e.U8(statusErr)
		e.String(c.Err.Kind)
		e.String(c.Err.Message)
		e.String(c.Err.Path)
		e.U64(c.Err.TaskID)
		e.String(c.Err.Callable)
		e.Bool(c.Err.NotStarted)
	}
	e.I64(c.Took)
	e.U32(uint32(len(c.Spans)))
	for _, sp := range c.Spans {
		e.String(sp.Lane)
		e.String(sp.Callable)
		e.I64(sp.Start)
		e.I64(sp.Dur)
	}
	c.Race.Encode(e)
}

// Encode writes the count (a COMPLETION's field, a node process's
// OpRaceCount reply).
func (r RaceCount) Encode(e *Encoder) {
	e.Bool(r.Checked)
	e.U32(r.Races)
}

// DecodeRaceCount reads what RaceCount.Encode wrote, as the rest of d.
func DecodeRaceCount(d *Decoder) (RaceCount, error) {
	r := decodeRaceCount(d)
	return r, d.Finish()
}

// decodeRaceCount reads a race count: a node that does not check has
// found nothing.
func decodeRaceCount(d *Decoder) RaceCount {
	r := RaceCount{Checked: d.Bool(), Races: d.U32()}
	switch {
	case d.err != nil:
	case r.Races > MaxRaces:
		d.FailBounds("%d races exceed their bound of %d", r.Races, MaxRaces)
	case !r.Checked && r.Races != 0:
		d.FailBounds("%d races from a node that does not check", r.Races)
	}
	return r
}

// DecodeCompletion reads a COMPLETION payload.
func DecodeCompletion(b []byte) (Completion, error) {
	d := NewDecoder(b)
	c := Completion{Seq: decodeSeq(d)}
	if decodeStatus(d) == statusErr {
		c.Err = &TaskFailure{
			Kind:     decodeKind(d),
			Message:  d.StringMax(MaxMessage),
			Path:     d.StringMax(MaxName),
			TaskID:   uint64(d.Int(MaxTaskID)),
			Callable: d.StringMax(MaxName),
		}
		c.Err.NotStarted = d.Bool()
	}
	c.Took = decodeNanos(d)
	n := d.U32()
	if d.err == nil && n > MaxSpans {
		d.FailBounds("%d spans exceed their bound of %d", n, MaxSpans)
	}
	for i := 0; d.err == nil && i < int(n); i++ {
		c.Spans = append(c.Spans, Span{Lane: d.StringMax(MaxSpanName), Callable: d.StringMax(MaxSpanName), Start: decodeNanos(d), Dur: decodeNanos(d)})
	}
	c.Race = decodeRaceCount(d)
	if err := d.Finish(); err != nil {
		return Completion{}, err
	}
	return c, nil
}

// decodeNanos reads a duration of 0..MaxSpanNanos nanoseconds.
func decodeNanos(d *Decoder) int64 {
	v := d.I64()
	if d.err == nil && (v < 0 || v > MaxSpanNanos) {
		d.FailBounds("a span time of %d ns is outside 0..%d", v, int64(MaxSpanNanos))
	}
	return v
}

// A reply's status byte.
const (
	statusOK  uint8 = 0
	statusErr uint8 = 1
)

func decodeStatus(d *Decoder) uint8 {
	s := d.U8()
	if d.err == nil && s != statusOK && s != statusErr {
		d.FailBounds("bad status %d (want 0 ok or 1 error)", s)
	}
	return s
}

// decodeSeq reads a non-zero sequence number.
func decodeSeq(d *Decoder) uint64 {
	s := d.U64()
	if d.err == nil && s == 0 {
		d.FailBounds("sequence 0")
	}
	return s
}
