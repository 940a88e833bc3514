package remote

// The daemon-wide memory bound. Sessions are processes of their own, so
// the bytes they hold are counted in a small ledger the daemon makes
// (anonymous memory, a memfd) and hands every session as a descriptor at
// spawn; no name of it exists anywhere.
//
// The ledger is a header word (the bound) and one entry per session the
// daemon may run at once: the entry's owner (the session's slot, 0 when
// free) and the bytes that session holds. A session claims a free entry
// when it starts and is the only writer of its bytes; the daemon settles
// the entry once the session's process has ended, whatever way it ended,
// so the bytes of a session that crashed come back.
//
// A reservation adds to the session's own word first and then sums every
// entry: over the bound, it takes its bytes back and is refused. Each word
// is changed by single atomic operations, so a process killed at any
// instruction leaves nothing the settling cannot undo, and since every
// reservation sees the ones made before its sum, the entries together
// never pass the bound. (Two sessions reserving the last bytes at the
// same moment may both be refused; neither is admitted past it.)

import (
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"simpler/engine"
)

// ledgerFD is the descriptor a session process finds its daemon's ledger
// at (after the connection, 3, and the link, 4).
const ledgerFD = 5

// ledger is the mapped ledger, in the daemon or in a session.
type ledger struct {
	mem   []byte
	words []uint64 // mem as words: the bound, then owner and bytes per entry
}

// newLedger makes a ledger of entries sessions bounded by bound bytes,
// and returns it with the file a session process inherits.
func newLedger(entries int, bound uint64) (*ledger, *os.File, error) {
	fd, err := unix.MemfdCreate("simpler-ledger", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, engine.Errorf(engine.RuntimeError, "the daemon's memory ledger: %v", err)
	}
	f := os.NewFile(uintptr(fd), "ledger")
	size := ledgerSize(entries)
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return nil, nil, engine.Errorf(engine.RuntimeError, "the daemon's memory ledger: %v", err)
	}
	l, err := mapLedger(f, size)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	atomic.StoreUint64(&l.words[0], bound)
	return l, f, nil
}

// openLedger maps the ledger a session inherited; f is closed.
func openLedger(f *os.File) (*ledger, error) {
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, engine.Errorf(engine.RuntimeError, "the daemon's memory ledger: %v", err)
	}
	size := int(st.Size())
	if size < ledgerSize(1) || (size-8)%16 != 0 {
		return nil, engine.Errorf(engine.RuntimeError, "the daemon's memory ledger has %d bytes, not a ledger's size", size)
	}
	return mapLedger(f, size)
}

func ledgerSize(entries int) int { return 8 + 16*entries }

func mapLedger(f *os.File, size int) (*ledger, error) {
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, engine.Errorf(engine.RuntimeError, "the daemon's memory ledger: map: %v", err)
	}
	// A mapping is page-aligned, so every word is 8-byte aligned.
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), size/8)
	return &ledger{mem: mem, words: words}, nil
}

func (l *ledger) close() error { return unix.Munmap(l.mem) }

func (l *ledger) bound() uint64 { return atomic.LoadUint64(&l.words[0]) }

func (l *ledger) entries() int { return (len(l.words) - 1) / 2 }

func (l *ledger) owner(i int) *uint64 { return &l.words[1+2*i] }
func (l *ledger) held(i int) *uint64  { return &l.words[2+2*i] }

// total is the bytes every session holds now.
func (l *ledger) total() uint64 {
	var sum uint64
	for i := range l.entries() {
		sum += atomic.LoadUint64(l.held(i))
	}
	return sum
}

// claim takes a free entry for the session of slot (non-zero).
func (l *ledger) claim(slot uint64) (ledgerEntry, error) {
	for i := range l.entries() {
		if atomic.CompareAndSwapUint64(l.owner(i), 0, slot) {
			return ledgerEntry{l: l, i: i}, nil
		}
	}
	return ledgerEntry{}, engine.Errorf(engine.RuntimeError, "the daemon's memory ledger has no free entry for session %d", slot)
}

// settle frees the entry of the session of slot, whose process has ended,
// and returns the bytes it still held.
func (l *ledger) settle(slot uint64) uint64 {
	for i := range l.entries() {
		if atomic.LoadUint64(l.owner(i)) == slot {
			n := atomic.SwapUint64(l.held(i), 0)
			atomic.StoreUint64(l.owner(i), 0) // after the bytes: a new owner starts at 0
			return n
		}
	}
	return 0
}

// ledgerEntry is one session's entry in its daemon's ledger.
type ledgerEntry struct {
	l *ledger
	i int
}

// reserve counts n more bytes for the entry's session if every session's
// bytes stay within the bound; else it returns false and the total it saw.
func (e ledgerEntry) reserve(n uint64) (uint64, bool) {
	b := e.l.bound()
	if n > b {
		return n, false
	}
	atomic.AddUint64(e.l.held(e.i), n)
	if t := e.l.total(); t > b {
		e.release(n)
		return t, false
	}
	return 0, true
}

// release gives back n bytes the entry's session reserved.
func (e ledgerEntry) release(n uint64) { atomic.AddUint64(e.l.held(e.i), -n) }
