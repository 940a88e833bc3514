package race

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"simpler/hal/shm"
)

// Process mode: a kernel that runs in a chip's or a SUB worker's own
// process records what it did (NewRecorder) instead of checking it; the
// log travels back with the task's reply, and the parent replays it
// under the member's context (Replay), so that the checks and the
// reports are those of thread mode.
//
// Memory is named across processes by canon: a byte of a shared-memory
// object is its object's inode and its offset, the same in every process
// that maps it; a byte of a process's own memory (a chip's device memory
// in its process) is its address there, tagged with the process.

// canon is the detector's key of the byte at addr of this process;
// private tags the key of memory that is not shared (0 in the process
// that runs the detector, where an address is already unique).
func canon(addr, private uintptr) uintptr {
	if ino, off, ok := shm.Identity(addr); ok {
		return 1<<63 | uintptr(ino&0x7fffffff)<<32 | off&0xffffffff
	}
	if private != 0 {
		return private | addr&(1<<48-1)
	}
	return addr
}

// Key is the detector's key of the byte at addr of this process, as the
// process that runs the detector would key it: the same in every process
// for shared memory.
func Key(addr uintptr) uintptr { return canon(addr, 0) }

// PrivateTag is the n-th tag of memory that is not shared: a chip's
// device memory (keyed by its device address under the tag), the memory
// of a child process. No two tags, and no address of the detector's own
// process, share a key.
func PrivateTag(n int) uintptr { return 1<<62 | uintptr(n&0x3fff)<<48 }

// Shared reports whether the byte at addr lies in shared memory, which
// Key names the same way in every process.
func Shared(addr uintptr) bool {
	_, _, ok := shm.Identity(addr)
	return ok
}

// ChipTag is the tag of chip's own memory (an engine chip or the process
// that runs it: any comparable identity), the same for every call with
// one chip.
func (d *Detector) ChipTag(chip any) uintptr {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t, ok := d.chipTags[chip]; ok {
		return t
	}
	t := PrivateTag(len(d.chipTags) + 1)
	d.chipTags[chip] = t
	return t
}

// DeviceKey is the key of device address addr of the chip c runs on (its
// Who.Chip, or a recorder's tag), 0 if c runs on no chip.
func (c *Ctx) DeviceKey(addr uint64) uintptr {
	tag := c.who.Chip
	if c.rec != nil {
		tag = c.rec.private
	}
	if tag == 0 {
		return 0
	}
	return tag | uintptr(addr)&(1<<48-1)
}

type evKind uint8

const (
	evAccess evKind = iota + 1
	evNotify
	evWaited
	evArrive
	evLeave
	evRank
)

// event is one step of a recorded context.
type event struct {
	kind    evKind
	key     uintptr
	n       int
	k       Kind
	op      string
	st      Stack
	width   int
	add     bool
	operand int64 // a notify's: what it set or added
	value   int64 // what the word held after a notify, or what a wait saw
	dom     string
	rank    int
	size    int
	desc    string
}

// recorder is the state of a recording context.
type recorder struct {
	private   uintptr
	events    []event
	size      int // what the encoded log will take, about
	truncated bool
}

// Log bounds: a log travels in a reply of at most a megabyte, and the
// parent replays every event under its lock.
const (
	maxLogEvents = 1 << 14
	maxLogBytes  = 768 << 10
	maxLogString = 4 << 10
	maxLogFrames = 64
)

// NewRecorder is a context for a task member that runs in this process
// for a parent that checks it: it records instead of checking. private
// is the process's PrivateTag.
func NewRecorder(private uintptr) *Ctx {
	return &Ctx{rec: &recorder{private: private}}
}

func (r *recorder) canon(addr uintptr) uintptr { return canon(addr, r.private) }

// add records e, unless the log is full: then the rest is dropped and the
// log says so.
func (r *recorder) add(e event) {
	n := 32 + len(e.op) + len(e.dom) + len(e.desc)
	for _, f := range e.st {
		n += 8 + len(f.Func) + len(f.Pos)
	}
	if r.truncated || len(r.events) >= maxLogEvents || r.size+n > maxLogBytes {
		r.truncated = true
		return
	}
	r.size += n
	r.events = append(r.events, e)
}

// Log is what a recording context recorded, encoded for the parent.
func (c *Ctx) Log() []byte {
	r := c.rec
	if r == nil {
		return nil
	}
	b := []byte{logVersion}
	if r.truncated {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(r.events)))
	for i := range r.events {
		b = appendEvent(b, &r.events[i])
	}
	return b
}

const logVersion = 1

func appendString(b []byte, s string) []byte {
	if len(s) > maxLogString {
		s = s[:maxLogString]
	}
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendEvent(b []byte, e *event) []byte {
	b = append(b, byte(e.kind))
	switch e.kind {
	case evAccess:
		b = binary.AppendUvarint(b, uint64(e.key))
		b = binary.AppendUvarint(b, uint64(e.n))
		b = append(b, byte(e.k))
	case evNotify, evWaited:
		b = binary.AppendUvarint(b, uint64(e.key))
		b = append(b, byte(e.width))
		if e.add {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = binary.AppendVarint(b, e.value)
		b = binary.AppendVarint(b, e.operand)
	case evArrive:
		b = appendString(b, e.dom)
		b = binary.AppendUvarint(b, uint64(e.rank))
		b = binary.AppendUvarint(b, uint64(e.size))
		return b
	case evLeave:
		return appendString(b, e.dom)
	case evRank:
		return appendString(b, e.desc)
	}
	b = appendString(b, e.op)
	st := e.st
	if len(st) > maxLogFrames {
		st = st[:maxLogFrames]
	}
	b = binary.AppendUvarint(b, uint64(len(st)))
	for _, f := range st {
		b = appendString(b, f.Func)
		b = appendString(b, f.Pos)
	}
	return b
}

// RecordedLog is a decoded log, ready to replay.
type RecordedLog struct {
	events    []event
	Truncated bool // the child dropped events past the log's bound
}

var errLog = errors.New("race: a malformed access log")

// logReader reads a log with every count and length bounded by the bytes
// left: a log comes from another process.
type logReader struct {
	b   []byte
	err error
}

func (r *logReader) fail(why string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errLog, why)
	}
}

func (r *logReader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.fail("short")
		return 0
	}
	x := r.b[0]
	r.b = r.b[1:]
	return x
}

func (r *logReader) uvarint(limit uint64) uint64 {
	if r.err != nil {
		return 0
	}
	x, n := binary.Uvarint(r.b)
	if n <= 0 || x > limit {
		r.fail("a number out of range")
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *logReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	x, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("a bad number")
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *logReader) string() string {
	n := r.uvarint(maxLogString)
	if r.err != nil || uint64(len(r.b)) < n {
		r.fail("a string past the end")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// DecodeLog parses a log a child sent.
func DecodeLog(b []byte) (*RecordedLog, error) {
	r := &logReader{b: b}
	if r.byte() != logVersion {
		return nil, fmt.Errorf("%w: unknown version", errLog)
	}
	l := &RecordedLog{Truncated: r.byte() == 1}
	n := r.uvarint(maxLogEvents)
	if n > uint64(len(r.b)) { // every event takes at least a byte
		r.fail("more events than bytes")
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		l.events = append(l.events, r.event())
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return nil, r.err
	}
	return l, nil
}

func (r *logReader) event() event {
	e := event{kind: evKind(r.byte())}
	switch e.kind {
	case evAccess:
		e.key = uintptr(r.uvarint(1<<64 - 1))
		e.n = int(r.uvarint(1 << 40))
		if e.k = Kind(r.byte()); e.k > AtomicWrite {
			r.fail("an unknown access kind")
		}
	case evNotify, evWaited:
		e.key = uintptr(r.uvarint(1<<64 - 1))
		if e.width = int(r.byte()); e.width != 4 && e.width != 8 {
			r.fail("a signal word that is not 4 or 8 bytes")
		}
		e.add = r.byte() == 1
		e.value = r.varint()
		e.operand = r.varint()
	case evArrive:
		e.dom = r.string()
		e.rank = int(r.uvarint(1 << 20))
		e.size = int(r.uvarint(1 << 20))
		if e.rank >= e.size {
			r.fail("a rank past its domain's size")
		}
		return e
	case evLeave:
		e.dom = r.string()
		return e
	case evRank:
		e.desc = r.string()
		return e
	default:
		r.fail("an unknown event")
		return e
	}
	e.op = r.string()
	nf := r.uvarint(maxLogFrames)
	for i := uint64(0); i < nf && r.err == nil; i++ {
		e.st = append(e.st, Frame{Func: r.string(), Pos: r.string()})
	}
	return e
}

// Addr is the address of b's first byte in this process, which the
// detector's methods take (and key by Key).
func Addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
