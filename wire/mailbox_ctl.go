package wire

import (
	"strings"
	"time"
)

// MailboxControl is one control-lane request after the init: what a
// parent asks of a child while a kernel may be running on its task lane.
// Only the fields its op uses (see the Op constants) are encoded.
type MailboxControl struct {
	Op         uint8
	Digest     string        // OpRegister: "sha256:..."
	Module     string        // OpRegister: where the child finds the callable, non-empty
	Name       string        // OpRegister: its top-level name, non-empty
	Ptr        uint64        // OpFree, OpCheck, copies: a device address; OpCommRelease: an allocation id
	Size       int           // OpMalloc, OpCheck, copies: bytes, ≤ MaxBufferBytes (copies: ≥ 1)
	Host       HostRef       // copies: the host side, which holds Size bytes
	Comm       CommAlloc     // OpCommAlloc
	Global     Control       // OpGlobal
	GlobalRank GlobalRankReq // OpGlobalRank
	Task       uint64        // OpCancel: the task's number on the task lane (1, 2, … as sent)
	Reason     string        // OpCancel: why, ≤ MaxReason
}

// Encode writes the control request.
func (c *MailboxControl) Encode(e *Encoder) {
	e.U8(c.Op)
	switch c.Op {
	case OpRegister:
		e.String(c.Digest)
		e.String(c.Module)
		e.String(c.Name)
	case OpMalloc:
		e.Int(c.Size)
	case OpFree, OpCommRelease:
		e.U64(c.Ptr)
	case OpCheck:
		e.U64(c.Ptr)
		e.Int(c.Size)
	case OpCopyIn, OpCopyOut:
		e.U64(c.Ptr)
		c.Host.encode(e)
		e.Int(c.Size)
	case OpCommAlloc:
		c.Comm.encode(e)
	case OpGlobal:
		c.Global.Encode(e) // the rest of the request
	case OpGlobalRank:
		c.GlobalRank.encode(e)
	case OpCancel:
		e.U64(c.Task)
		e.String(c.Reason)
	}
}

// DecodeMailboxControl reads a control request, trailing bytes included,
// so that the child acts on none of a malformed one.
func DecodeMailboxControl(b []byte) (MailboxControl, error) {
	d := NewDecoder(b)
	c := MailboxControl{Op: d.U8()}
	switch c.Op {
	case OpShutdown, OpPing, OpRaceCount:
	case OpCancel:
		c.Task = d.U64()
		c.Reason = d.StringMax(MaxReason)
	case OpRegister:
		c.Digest = decodeDigest(d)
		c.Module = decodeName(d, "module name")
		c.Name = decodeName(d, "function name")
	case OpMalloc:
		c.Size = d.Int(MaxBufferBytes)
	case OpFree, OpCommRelease:
		c.Ptr = d.U64()
	case OpCheck:
		c.Ptr, c.Size = d.U64(), d.Int(MaxBufferBytes)
	case OpCopyIn, OpCopyOut:
		c.Ptr, c.Host, c.Size = d.U64(), decodeHostRef(d), d.Int(MaxBufferBytes)
		if d.err == nil && (c.Size == 0 || !c.Host.holds(int64(c.Size))) {
			d.FailBounds("a copy of %d bytes at offset %d of the %d bytes of %s", c.Size, c.Host.Off, c.Host.Size, c.Host.Name)
		}
	case OpCommAlloc:
		c.Comm = decodeCommAlloc(d)
	case OpGlobal:
		// A copy: the command must not alias the mailbox, which the next
		// request overwrites.
		g, err := DecodeControl(d.Raw(d.Remaining()))
		d.nest("global-domain command", err)
		c.Global = g
	case OpGlobalRank:
		c.GlobalRank = decodeGlobalRankReq(d)
	default:
		if d.err == nil {
			d.FailBounds("unknown control op %d", c.Op)
		}
	}
	if err := d.Finish(); err != nil {
		return MailboxControl{}, err
	}
	return c, nil
}

// nest records the error of a message decoded from inside this one,
// naming what it was; errors.Is still sees its class.
func (d *Decoder) nest(what string, err error) {
	if d.err == nil && err != nil {
		d.err = &nestedError{what: what, err: err}
	}
}

type nestedError struct {
	what string
	err  error
}

func (e *nestedError) Error() string {
	return "wire: " + e.what + ": " + strings.TrimPrefix(e.err.Error(), "wire: ")
}

func (e *nestedError) Unwrap() error { return e.err }

// CommAlloc is OpCommAlloc: one rank's part of a communication domain's
// allocation, which the child runs on its chip (the child adds its
// parent's prefix to the names).
type CommAlloc struct {
	Namespace    string // the allocating worker's, part of every name
	AllocationID uint64
	Name         string        // the domain's label, for messages
	Ranks        int           // ≤ MaxCommRanks
	WindowSize   int           // ≤ MaxBufferBytes
	Timeout      time.Duration // of the allocation barrier
	Rank         int           // this child's rank, ≤ MaxCommRanks
	Key          string        // the allocation's random key, part of every name (≤ MaxName)
}

func (c *CommAlloc) encode(e *Encoder) {
	e.String(c.Namespace)
	e.U64(c.AllocationID)
	e.String(c.Name)
	e.Int(c.Ranks)
	e.Int(c.WindowSize)
	e.I64(int64(c.Timeout))
	e.Int(c.Rank)
	e.String(c.Key)
}

func decodeCommAlloc(d *Decoder) CommAlloc {
	return CommAlloc{Namespace: d.StringMax(MaxName), AllocationID: d.U64(), Name: d.String(),
		Ranks: d.Int(MaxCommRanks), WindowSize: d.Int(MaxBufferBytes), Timeout: time.Duration(d.I64()), Rank: d.Int(MaxCommRanks), Key: d.StringMax(MaxName)}
}

// The steps of OpGlobalRank: a level-3 node whose chips are processes runs
// each rank's part of a global domain (hal/comm's GlobalRank) in the
// process of the rank's chip, where the chip's memory is.
const (
	RankPrepare    uint8 = iota + 1 // Prefix, Name, Ranks, WindowSize, Timeout → GlobalPrepareReply
	RankImport                      // Table → AddrReply, the rank's device CommContext
	RankCommit                      // → ()
	RankInvalidate                  // → ()
	RankRelease                     // → (); an unknown rank is released already
)

// GlobalRankReq is one OpGlobalRank step. Every step names the rank by
// domain id, generation and rank; RankPrepare carries the rest of the
// rank's request (the node chooses the names' prefix), RankImport every
// rank's descriptor in rank order.
type GlobalRankReq struct {
	Step       uint8
	DomainID   uint64
	Generation uint64
	Rank       int             // < MaxRanks
	Prefix     string          // RankPrepare
	Name       string          // RankPrepare: the domain's label
	Ranks      int             // RankPrepare: ≤ MaxRanks
	WindowSize int             // RankPrepare: ≤ MaxBufferBytes
	Timeout    time.Duration   // RankPrepare
	Table      DescriptorTable // RankImport
}

func (g *GlobalRankReq) encode(e *Encoder) {
	e.U8(g.Step)
	e.U64(g.DomainID)
	e.U64(g.Generation)
	e.Int(g.Rank)
	switch g.Step {
	case RankPrepare:
		e.String(g.Prefix)
		e.String(g.Name)
		e.Int(g.Ranks)
		e.Int(g.WindowSize)
		e.I64(int64(g.Timeout))
	case RankImport:
		g.Table.encodeBlob(e)
	}
}

func decodeGlobalRankReq(d *Decoder) GlobalRankReq {
	g := GlobalRankReq{Step: d.U8(), DomainID: d.U64(), Generation: d.U64(), Rank: d.Int(MaxRanks - 1)}
	switch g.Step {
	case RankPrepare:
		g.Prefix, g.Name = d.StringMax(MaxName), d.String()
		g.Ranks, g.WindowSize = d.Int(MaxRanks), d.Int(MaxBufferBytes)
		g.Timeout = time.Duration(d.I64())
	case RankImport:
		g.Table = decodeTableBlob(d)
	case RankCommit, RankInvalidate, RankRelease:
	default:
		if d.err == nil {
			d.FailBounds("unknown global rank step %d", g.Step)
		}
	}
	return g
}

// AddrReply is a result that is one address in the child's chip:
// OpMalloc's allocation, RankImport's device CommContext.
type AddrReply struct{ Addr uint64 }

// Encode writes the result.
func (r *AddrReply) Encode(e *Encoder) { e.U64(r.Addr) }

// DecodeAddrReply reads the result.
func DecodeAddrReply(b []byte) (AddrReply, error) {
	d := NewDecoder(b)
	r := AddrReply{Addr: d.U64()}
	if err := d.Finish(); err != nil {
		return AddrReply{}, err
	}
	return r, nil
}

// CommAllocReply is OpCommAlloc's result: the rank's device CommContext,
// and its window's base in the chip and size.
type CommAllocReply struct {
	DeviceCtx  uint64
	WindowBase uint64
	WindowSize int // ≤ MaxBufferBytes
	// WindowKey is the window's first byte as the race detector keys it
	// in every process (race.Key): how the parent names the window in
	// its reports without mapping it.
	WindowKey uint64
}

// Encode writes the result.
func (r *CommAllocReply) Encode(e *Encoder) {
	e.U64(r.DeviceCtx)
	e.U64(r.WindowBase)
	e.Int(r.WindowSize)
	e.U64(r.WindowKey)
}

// DecodeCommAllocReply reads the result.
func DecodeCommAllocReply(b []byte) (CommAllocReply, error) {
	d := NewDecoder(b)
	r := CommAllocReply{DeviceCtx: d.U64(), WindowBase: d.U64(), WindowSize: d.Int(MaxBufferBytes), WindowKey: d.U64()}
	if err := d.Finish(); err != nil {
		return CommAllocReply{}, err
	}
	return r, nil
}

// GlobalPrepareReply is RankPrepare's result: the descriptor the rank
// exports and its window's base in the chip.
type GlobalPrepareReply struct {
	Descriptor Descriptor
	WindowBase uint64
}

// Encode writes the result.
func (r *GlobalPrepareReply) Encode(e *Encoder) {
	e.Raw(r.Descriptor[:])
	e.U64(r.WindowBase)
}

// DecodeGlobalPrepareReply reads the result.
func DecodeGlobalPrepareReply(b []byte) (GlobalPrepareReply, error) {
	d := NewDecoder(b)
	var r GlobalPrepareReply
	copy(r.Descriptor[:], d.take(DescriptorSize))
	r.WindowBase = d.U64()
	if err := d.Finish(); err != nil {
		return GlobalPrepareReply{}, err
	}
	return r, nil
}
