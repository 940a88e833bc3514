package comm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"simpler/hal"
	"simpler/internal/bounds"
	"simpler/internal/futex"
	"simpler/internal/halt"
	"simpler/kind"
)

// View is a kernel's handle on one rank of a domain, made by Open from the
// CommContext in device memory. Its methods may be called from many
// goroutines at once. A View must not outlive its rank's Release: each
// call refuses a released domain, but a call already running when the
// domain is released may touch unmapped memory.
type View struct {
	chip    hal.Chip
	live    *uint32 // the CommContext's live flag
	rank    int
	size    int
	winSize int
	allocID uint64
	name    string
	bases   []uint64
	wins    [][]byte // every rank's window as mapped in this chip
	hdr     []byte
	wk      *wakeHeader // this process's wake registry for the header, nil if no rank here attached it
}

// Open reads and validates the CommContext at deviceCtx on chip: it must
// lie in live device memory, carry the magic, version and live flag, and
// every window and the header it names must be mapped in chip.
func Open(chip hal.Chip, deviceCtx uint64) (*View, error) {
	bad := func(why string) (*View, error) {
		return nil, kind.Errorf(kind.ValueError, "chip.comm: %#x is not a live communication domain on device %d: %s",
			deviceCtx, chip.DeviceID(), why)
	}
	if deviceCtx%8 != 0 {
		return bad("not 8-byte aligned")
	}
	head, err := chip.Bytes(deviceCtx, offBases)
	if err != nil {
		return bad(kind.Message(err))
	}
	size, nameLen, err := ctxHead(head)
	if errors.Is(err, errReleased) {
		// Used after release: a RuntimeError, as for a freed tensor, a
		// released domain or remote buffer.
		return nil, kind.Errorf(kind.RuntimeError, "chip.comm: %#x on device %d: %v", deviceCtx, chip.DeviceID(), err)
	} else if err != nil {
		return bad(err.Error())
	}
	full, err := chip.Bytes(deviceCtx, ctxLen(size, nameLen))
	if err != nil {
		return bad(kind.Message(err))
	}
	f, err := decodeCtx(full)
	if err != nil {
		return bad(err.Error())
	}
	v := &View{
		chip: chip, live: futex.Word32(head, offLive), // where it lies: Release clears it
		rank: f.rank, size: f.size, winSize: f.windowSize, allocID: f.allocID, name: f.name,
		bases: f.bases, wins: make([][]byte, f.size),
	}
	for j, base := range v.bases {
		if v.wins[j], err = chip.Bytes(base, v.winSize); err != nil {
			return bad(fmt.Sprintf("the window of rank %d is not mapped: %s", j, kind.Message(err)))
		}
	}
	if v.hdr, err = chip.Bytes(f.headerBase, f.headerSize); err != nil {
		return bad("the header is not mapped: " + kind.Message(err))
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(v.hdr)))%8 != 0 {
		return bad("the header is misaligned")
	}
	v.wk = wakeLookup(v.hdr, v.size)
	return v, nil
}

// offReserved is the CommContext's reserved word, after the name length
// (see the layout in layout.go); encodeCtx leaves it zero.
const offReserved = offNameLen + 4

// errReleased is ctxHead's answer for a context whose domain was released.
var errReleased = errors.New("the domain was released")

// ctxHead checks the fixed part of a CommContext (its first offBases
// bytes) and returns the rank count and name length that give the whole
// context's length. Every field read here comes from device memory any
// kernel may have written, so each is bounded before it is used as a
// size. b must be 4-byte aligned, as device memory is: the live word is
// read atomically, since Release clears it concurrently.
func ctxHead(b []byte) (size, nameLen int, err error) {
	if len(b) < offBases {
		return 0, 0, fmt.Errorf("a CommContext of %d bytes, want at least %d", len(b), offBases)
	}
	le := binary.LittleEndian
	switch {
	case le.Uint64(b[offMagic:]) != ctxMagic:
		return 0, 0, errors.New("no CommContext there")
	case le.Uint32(b[offVersion:]) != ctxVersion:
		return 0, 0, fmt.Errorf("CommContext version %d, want %d", le.Uint32(b[offVersion:]), ctxVersion)
	case atomic.LoadUint32(futex.Word32(b, offLive)) != 1:
		return 0, 0, errReleased
	}
	rank, n, name := le.Uint32(b[offRank:]), le.Uint32(b[offSize:]), le.Uint32(b[offNameLen:])
	winSize, hdrSize := le.Uint64(b[offWindowSize:]), le.Uint64(b[offHeaderSize:])
	if n < 1 || n > maxRanks || rank >= n || name > maxNameLen || winSize == 0 || winSize > 1<<40 ||
		hdrSize < uint64(headerSize(int(n))) || hdrSize > 1<<30 || le.Uint32(b[offReserved:]) != 0 {
		return 0, 0, errors.New("corrupt CommContext")
	}
	return int(n), int(name), nil
}

// decodeCtx parses a whole CommContext, exactly ctxLen bytes of it; its
// result re-encodes (encodeCtx) to the same bytes.
func decodeCtx(b []byte) (ctxFields, error) {
	size, nameLen, err := ctxHead(b)
	if err != nil {
		return ctxFields{}, err
	}
	if len(b) != ctxLen(size, nameLen) {
		return ctxFields{}, fmt.Errorf("a CommContext of %d bytes, want %d", len(b), ctxLen(size, nameLen))
	}
	le := binary.LittleEndian
	f := ctxFields{
		rank: int(le.Uint32(b[offRank:])), size: size,
		windowSize: int(le.Uint64(b[offWindowSize:])), // at most 2^40: ctxHead checked
		allocID:    le.Uint64(b[offAllocID:]),
		headerBase: le.Uint64(b[offHeaderBase:]),
		headerSize: int(le.Uint64(b[offHeaderSize:])), // at most 2^30
		name:       string(b[offBases+8*size:]),
		bases:      make([]uint64, size),
	}
	for j := range f.bases {
		f.bases[j] = le.Uint64(b[offBases+8*j:])
	}
	return f, nil
}

func (v *View) Rank() int            { return v.rank }
func (v *View) Size() int            { return v.size }
func (v *View) WindowSize() int      { return v.winSize }
func (v *View) Name() string         { return v.name }
func (v *View) AllocationID() uint64 { return v.allocID }

// domain names the domain in messages: its quoted name, or its
// allocation id if it has none.
func (v *View) domain() string {
	if v.name != "" {
		return strconv.Quote(v.name)
	}
	return "#" + strconv.FormatUint(v.allocID, 10)
}

// alive refuses a released domain (its CommContext was marked dead).
func (v *View) alive(op string) error {
	if atomic.LoadUint32(v.live) != 1 {
		return kind.Errorf(kind.RuntimeError, "%s: domain %s rank %d was released", op, v.domain(), v.rank)
	}
	return nil
}

func (v *View) checkRank(op string, rank int) error {
	if rank < 0 || rank >= v.size {
		return kind.Errorf(kind.IndexError, "%s: rank %d out of range for domain %s of %d ranks", op, rank, v.domain(), v.size)
	}
	return nil
}

// Base is rank's window base in this chip's address space.
func (v *View) Base(rank int) (uint64, error) {
	if err := v.checkRank("comm.base", rank); err != nil {
		return 0, err
	}
	return v.bases[rank], nil
}

// Window returns rank's whole window as this chip mapped it when the view
// was opened, rank in range: the bytes a kernel's views of that window
// resolve to, looked up once per view instead of once per access.
func (v *View) Window(rank int) []byte { return v.wins[rank] }

// word validates a width-byte word at device address addr inside rank's
// window and returns its host address.
func (v *View) word(op string, rank int, addr uint64, width int) (unsafe.Pointer, error) {
	if width != 4 && width != 8 {
		return nil, kind.Errorf(kind.ValueError, "%s: width must be 4 or 8 bytes, got %d", op, width)
	}
	base := v.bases[rank]
	if !bounds.Inside(addr, uint64(width), base, uint64(v.winSize)) {
		return nil, kind.Errorf(kind.ValueError, "%s: %d-byte word at %#x is not inside rank %d's window [%#x, %#x) of domain %s",
			op, width, addr, rank, base, base+uint64(v.winSize), v.domain())
	}
	if addr%uint64(width) != 0 {
		return nil, kind.Errorf(kind.ValueError, "%s: %d-byte word at %#x is not %d-byte aligned", op, width, addr, width)
	}
	p := unsafe.Pointer(&v.wins[rank][addr-base])
	if uintptr(p)%uintptr(width) != 0 { // windows are page aligned; a failure is a bug
		panic(fmt.Sprintf("comm: window of rank %d mapped misaligned at %p", rank, p))
	}
	return p, nil
}

// Notify stores (op "set") or atomically adds (op "add") value into the
// width-byte word at addr, a device address in this chip's space inside
// rank's window, then wakes whoever waits on that window, in any process.
// A 4-byte word takes values that fit int32; "add" wraps as int32.
func (v *View) Notify(rank int, addr uint64, width int, value int64, op string) error {
	const name = "comm.notify"
	if err := v.alive(name); err != nil {
		return err
	}
	if err := v.checkRank(name, rank); err != nil {
		return err
	}
	if op != "set" && op != "add" {
		return kind.Errorf(kind.ValueError, "%s: op must be \"set\" or \"add\", got %q", name, op)
	}
	p, err := v.word(name, rank, addr, width)
	if err != nil {
		return err
	}
	if width == 4 {
		if value < math.MinInt32 || value > math.MaxInt32 {
			return kind.Errorf(kind.ValueError, "%s: value %d does not fit a 4-byte word", name, value)
		}
		if op == "set" {
			atomic.StoreInt32((*int32)(p), int32(value))
		} else {
			atomic.AddInt32((*int32)(p), int32(value))
		}
	} else if op == "set" {
		atomic.StoreInt64((*int64)(p), value)
	} else {
		atomic.AddInt64((*int64)(p), value)
	}
	// Waiters sleep on the target's sequence word, not on the value:
	// that covers 8-byte words (futex compares 32 bits) and values that
	// change back and forth.
	seq := futex.Word32(v.hdr, rankWord(rank, rankSeq))
	atomic.AddUint32(seq, 1)
	if v.wk != nil {
		v.wk.wake(rank) // goroutines of this process parked on it (wake.go)
	}
	if atomic.LoadUint32(futex.Word32(v.hdr, rankWord(rank, rankSleepers))) != 0 {
		futex.Wake(seq)
	}
	return nil
}

// spinFor is how long a Wait, a Barrier or the allocation barrier spins
// before it sleeps (futex.SpinUntil): the ranks of one collective arrive
// within microseconds of each other, and waking a sleeping thread costs
// 50-100 µs on the virtual machines this runs on.
var spinFor = 50 * time.Microsecond

var compares = map[string]func(a, b int64) bool{
	">=": func(a, b int64) bool { return a >= b },
	"==": func(a, b int64) bool { return a == b },
	"!=": func(a, b int64) bool { return a != b },
	">":  func(a, b int64) bool { return a > b },
	"<":  func(a, b int64) bool { return a < b },
	"<=": func(a, b int64) bool { return a <= b },
}

// Wait blocks until the width-byte word at addr, inside this rank's own
// window, compares true against value (observed <cmp> value), and returns
// the observed value. It gives up with a TimeoutError after timeout.
// Stores made by Notify wake it at once; other stores are noticed within
// a few milliseconds.
func (v *View) Wait(addr uint64, width int, value int64, cmp string, timeout time.Duration) (int64, error) {
	return v.WaitStop(addr, width, value, cmp, timeout, nil)
}

// WaitStop is Wait that also ends, with stop's error, once the task's
// stop signal fires (halt): at once where the ranks are goroutines of this
// process, within a futex sleep (futex.MaxSleep) otherwise. A nil stop
// never fires.
func (v *View) WaitStop(addr uint64, width int, value int64, cmp string, timeout time.Duration, stop *halt.Signal) (int64, error) {
	const name = "comm.wait"
	if err := v.alive(name); err != nil {
		return 0, err
	}
	holds, ok := compares[cmp]
	if !ok {
		return 0, kind.Errorf(kind.ValueError, "%s: cmp must be one of >=, ==, !=, >, <, <=; got %q", name, cmp)
	}
	if timeout <= 0 {
		return 0, kind.Errorf(kind.ValueError, "%s: timeout must be > 0, got %v", name, timeout)
	}
	p, err := v.word(name, v.rank, addr, width)
	if err != nil {
		return 0, err
	}
	load := func() int64 { return atomic.LoadInt64((*int64)(p)) }
	if width == 4 {
		load = func() int64 { return int64(atomic.LoadInt32((*int32)(p))) }
	}
	var seen int64
	var met bool
	// ready is also true once stop fired, so that both ways of waiting
	// end on it; met tells the two apart.
	ready := func() bool {
		seen = load()
		met = holds(seen, value)
		return met || stop.Stopped()
	}
	var ended bool
	if v.wk.local() { // every rank is a goroutine of this process: park in Go
		ended = v.wk.parkUntil(v.rank, timeout, ready, stop)
	} else {
		seq := futex.Word32(v.hdr, rankWord(v.rank, rankSeq))
		sleepers := futex.Word32(v.hdr, rankWord(v.rank, rankSleepers))
		ended = futex.SpinUntil(seq, sleepers, time.Now().Add(timeout), spinFor, ready)
	}
	switch {
	case met:
		return seen, nil
	case ended:
		return seen, stop.Err(fmt.Sprintf("%s on domain %s rank %d", name, v.domain(), v.rank))
	}
	return seen, v.waitTimeout(timeout, cmp, value, seen)
}

// WaitTimeout is the TimeoutError of a comm.wait that waited timeout for
// value and saw seen last (a scheduler that waits for it says the same).
func (v *View) WaitTimeout(timeout time.Duration, cmp string, value, seen int64) error {
	return v.waitTimeout(timeout, cmp, value, seen)
}

func (v *View) waitTimeout(timeout time.Duration, cmp string, value, seen int64) error {
	return kind.Errorf(kind.TimeoutError, "comm.wait on domain %s rank %d: waited %v for value %s %d, observed %d",
		v.domain(), v.rank, timeout, cmp, value, seen)
}

// Barrier returns once every rank of the domain has called it, and may be
// used any number of times; each rank calls it once per round. Its state
// is a generation counter in the header, never in the windows. A rank
// that times out withdraws its arrival, so the round can still complete
// when it calls again.
func (v *View) Barrier(timeout time.Duration) error {
	return v.BarrierStop(timeout, nil)
}

// BarrierStop is Barrier that also ends, with stop's error, within a
// futex sleep (futex.MaxSleep) of the task's stop signal firing (halt). A
// stopped rank withdraws its arrival as one that timed out does. A nil
// stop never fires.
func (v *View) BarrierStop(timeout time.Duration, stop *halt.Signal) error {
	const name = "comm.barrier"
	if err := v.alive(name); err != nil {
		return err
	}
	if timeout <= 0 {
		return kind.Errorf(kind.ValueError, "%s: timeout must be > 0, got %v", name, timeout)
	}
	deadline := time.Now().Add(timeout)
	gen, done := v.BarrierArrive()
	if done {
		return nil
	}
	w := futex.Word32(v.hdr, hdrBarrier)
	passed := func() bool { return atomic.LoadUint32(w)>>16 != gen }
	if futex.SpinUntil(w, nil, deadline, spinFor, func() bool { return passed() || stop.Stopped() }) && passed() {
		return nil
	}
	return v.BarrierGiveUp(gen, timeout, stop.Err(fmt.Sprintf("%s on domain %s rank %d", name, v.domain(), v.rank)))
}

// BarrierArrive is the rank's arrival at the barrier: it returns the
// round it arrived in, and whether it was the last, which passed it.
// Whoever arrived and was not the last waits until BarrierRound changes
// (BarrierStop does; a deterministic scheduler blocks on it), or gives up
// (BarrierGiveUp).
func (v *View) BarrierArrive() (round uint32, passed bool) {
	// The word packs generation<<16 | arrived, so that arriving, the last
	// arrival's reset-and-advance, and a withdrawal are each one CAS and
	// cannot mix rounds.
	w := futex.Word32(v.hdr, hdrBarrier)
	slot := futex.Word32(v.hdr, rankWord(v.rank, rankBarrier))
	n := uint32(v.size)
	for {
		x := atomic.LoadUint32(w)
		gen := x >> 16
		atomic.StoreUint32(slot, gen+1) // for messages only: who arrived in this round
		if x&0xffff+1 == n {
			if atomic.CompareAndSwapUint32(w, x, (gen+1)&0xffff<<16) {
				futex.Wake(w)
				return gen, true
			}
		} else if atomic.CompareAndSwapUint32(w, x, x+1) {
			return gen, false
		}
	}
}

// BarrierGiveUp withdraws the rank's arrival at round, which did not pass
// in timeout: nil if it passed after all, else stopErr if the task was
// stopped (not nil), else the TimeoutError naming the ranks that did not
// arrive.
func (v *View) BarrierGiveUp(round uint32, timeout time.Duration, stopErr error) error {
	const name = "comm.barrier"
	if !withdraw(futex.Word32(v.hdr, hdrBarrier), round) {
		return nil // the round completed as we gave up
	}
	arrived, miss := missingRanks(v.hdr, v.size, rankBarrier, round+1)
	atomic.StoreUint32(futex.Word32(v.hdr, rankWord(v.rank, rankBarrier)), (round+1)|gaveUp)
	if stopErr != nil {
		return stopErr
	}
	return kind.Errorf(kind.TimeoutError, "%s on domain %s rank %d: waited %v; %d of %d ranks arrived%s",
		name, v.domain(), v.rank, timeout, arrived, v.size, miss)
}

// withdraw takes back an arrival at round gen of the barrier word w; it
// reports false if the round completed first, when there is nothing to
// take back.
func withdraw(w *uint32, gen uint32) bool {
	for {
		x := atomic.LoadUint32(w)
		if x>>16 != gen {
			return false
		}
		if atomic.CompareAndSwapUint32(w, x, x-1) {
			return true
		}
	}
}

// Compare is the test comm.wait applies for cmp (observed <cmp> value);
// ok is false if cmp is not one of them.
func Compare(cmp string) (holds func(observed, value int64) bool, ok bool) {
	holds, ok = compares[cmp]
	return holds, ok
}

// Word is the width-byte signal word at addr of rank's window, as this
// process maps it (what the race detector keys it by and loads).
func (v *View) Word(rank int, addr uint64, width int) ([]byte, error) {
	p, err := v.word("comm.word", rank, addr, width)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), width), nil
}

// LoadWord reads a 4- or 8-byte signal word atomically.
func LoadWord(b []byte) int64 {
	if len(b) == 4 {
		return int64(atomic.LoadInt32((*int32)(unsafe.Pointer(unsafe.SliceData(b)))))
	}
	return atomic.LoadInt64((*int64)(unsafe.Pointer(unsafe.SliceData(b))))
}

// BarrierRound is the round the domain's barrier is in: it changes once
// every rank has arrived. A rank that reads it before it arrives can
// tell, later, that the barrier it arrived at has passed.
func (v *View) BarrierRound() uint32 {
	return atomic.LoadUint32(futex.Word32(v.hdr, hdrBarrier)) >> 16
}

// Alive refuses a released domain, as every call of a View does first:
// for a caller that drives a wait itself (a deterministic scheduler).
func (v *View) Alive(op string) error { return v.alive(op) }
