// Package race is simpler's data-race and deadlock detector, what
// `--race` turns on.
//
// The contract:
//
//   - Every thread of control that touches memory is a context (Ctx): the
//     orchestration (Detector.Main, one per process), and one per member
//     of every task a kernel or SUB callable runs (Detector.Start). Each
//     carries a vector clock.
//   - Happens-before comes only from the edges the callers report: a
//     context starts after the clocks it is given (the submitting
//     orchestration's Release, the end clocks of the producers upstream's
//     tag rules order it after, the runs before it); a context that waits
//     for another acquires that one's End (a run's wait, drain); a
//     comm.wait acquires the notify whose value it observed (Notify,
//     Waited); a barrier orders everything before any rank's arrival
//     before everything after every rank's departure (Arrive, Leave).
//   - Every access names its bytes by their address in this process
//     (Access): in thread mode every chip, window and host tensor is
//     mapped once per process, so an address is the byte's identity. Two
//     accesses of overlapping bytes race when neither happens before the
//     other, at least one writes, and not both are atomic (notify and
//     wait are atomic; atomics never race with each other).
//   - A race is reported once per pair of code locations, on the
//     detector's writer, at the moment it is seen; the program runs on.
//     Races returns how many distinct pairs were seen, which decides
//     the exit status (66, as Go's detector).
//   - Memory the callers name (Name) is described in reports; memory
//     named unwritten (run-heap blocks) reports a read of bytes no one
//     wrote since as an uninitialised read. Forget drops what is known of
//     freed memory, so its next user starts clean.
//   - Deadlock: contexts blocked in comm.wait/comm.barrier (Block), the
//     orchestration waiting for a run (Park), and the assignments handed to
//     endpoints but not started (Queue) tell the detector when nothing can
//     move any more; it then reports every blocked rank's wait and stops
//     each with a RuntimeError.
//
// Every method takes the detector's one lock: the detector trades speed
// for a simple, total order of the events it sees.
package race

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
)

// Kind is what an access does to its bytes.
type Kind uint8

const (
	Read        Kind = iota
	Write            // a plain store
	AtomicRead       // comm.wait's loads of a signal word
	AtomicWrite      // comm.notify, set or add
)

func (k Kind) writes() bool { return k == Write || k == AtomicWrite }
func (k Kind) atomic() bool { return k == AtomicRead || k == AtomicWrite }

func (k Kind) String() string {
	switch k {
	case Write:
		return "Write"
	case AtomicRead:
		return "Atomic read"
	case AtomicWrite:
		return "Atomic write"
	}
	return "Read"
}

// Frame is one call of the code that made an access: a Starlark function
// and the position of the call in it.
type Frame struct {
	Func string
	Pos  string // file:line:col
}

// Stack is the Starlark call stack of an access, innermost call first.
type Stack []Frame

// Who describes a context for reports and for the "why unordered" line.
type Who struct {
	Desc   string // "kernel exchange (task 2, member 1, run 1, on next_level 1)"
	Owner  any    // the engine Worker the task belongs to; nil for the orchestration
	Run    uint64
	Task   int
	Member int
	Orch   bool // the orchestration itself
	// Parent is the context that submitted the task's run: the
	// orchestration, or the level-4 task whose child run it is.
	Parent *Ctx
	// Chip is the ChipTag of the chip the member runs on, which keys its
	// device memory (DeviceKey); 0 off a chip.
	Chip uintptr
}

// Ctx is one thread of control: the orchestration or one task member.
type Ctx struct {
	d    *Detector
	id   uint32
	vc   vclock
	who  Who
	rank string // "rank 1 of domain \"pair\"", once the context opened a comm
	wait *Wait  // what it is blocked in, nil when it runs
	done bool
	rec  *recorder // a context that records for another process (NewRecorder)
}

// Who is what reports say of c.
func (c *Ctx) Who() Who { return c.who }

// Detector is the state of one process's detector.
type Detector struct {
	mu      sync.Mutex
	out     io.Writer
	nextID  uint32
	main    *Ctx
	mem     shadow
	regions []region
	signals map[uintptr]*signal
	bars    map[barrierKey]*barrierRound
	counts  map[rankKey]int
	notes   map[edgeKey]string
	pairs   map[pairKey]*pair
	order   []pairKey // pairs in the order first seen
	ended   []endedCtx
	live    int // contexts started and not exited, the orchestration included
	blocked int // of those, how many are blocked (Block or Park)
	waiting map[*Ctx]struct{}
	queued  int // assignments handed to endpoints, not started or not local
	races   int
	uninit  int
	dropped bool // some access history was dropped for its bound
	cut     bool // a child process's access log was cut at its bound

	recording int             // members running in other processes, not yet replayed
	chipTags  map[any]uintptr // ChipTag
	replayed  *sync.Cond      // on mu: a replay made progress (replay.go)
}

// New returns a detector that writes its reports to out.
func New(out io.Writer) *Detector {
	d := &Detector{
		out: out, signals: map[uintptr]*signal{}, bars: map[barrierKey]*barrierRound{},
		counts: map[rankKey]int{}, notes: map[edgeKey]string{}, pairs: map[pairKey]*pair{},
		waiting: map[*Ctx]struct{}{}, chipTags: map[any]uintptr{},
	}
	d.replayed = sync.NewCond(&d.mu)
	d.main = d.newCtx(Who{Desc: "the orchestration (main thread)", Orch: true})
	return d
}

func (d *Detector) newCtx(who Who) *Ctx {
	d.nextID++
	c := &Ctx{d: d, id: d.nextID, who: who}
	c.vc.set(c.id, 1)
	d.live++
	return c
}

// Main is the process's orchestration context: the script's main thread
// and the orchestration functions it runs.
func (d *Detector) Main() *Ctx { return d.main }

// Start makes the context of a task member that begins after every clock
// in after.
func (d *Detector) Start(who Who, after ...Clock) *Ctx {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.newCtx(who)
	for i := range after {
		c.vc.join(&after[i].vc)
	}
	return c
}

// tick ends c's current epoch, so that what it does next is not covered
// by a clock it just released.
func (c *Ctx) tick() { c.vc.set(c.id, c.vc.get(c.id)+1) }

// Release is c's clock now, for an edge from what c did so far (a
// submit: the task starts after it).
func (c *Ctx) Release() Clock {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	cl := Clock{c.vc.copy()}
	c.tick()
	return cl
}

// Acquire orders what c does next after everything cl has seen.
func (c *Ctx) Acquire(cl Clock) {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	c.vc.join(&cl.vc)
	if c == c.d.main {
		c.d.maybeQuiesce()
	}
}

// endedCtx is a context that ended with clock clk, not yet known to be
// covered by the orchestration's clock.
type endedCtx struct {
	id, clk uint32
}

// Finish is c's end clock, taken once it will access nothing more;
// whatever waits for it acquires it. Exit follows once the engine has
// passed its completion on.
func (c *Ctx) Finish() Clock {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	c.d.ended = append(c.d.ended, endedCtx{c.id, c.vc.get(c.id)})
	return Clock{c.vc.copy()}
}

// Exit ends c for the deadlock count.
func (c *Ctx) Exit() {
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.done {
		return
	}
	c.done = true
	if c.wait != nil {
		c.wait = nil
		d.blocked--
		delete(d.waiting, c)
	}
	d.live--
	d.checkDeadlock()
}

// maybeQuiesce forgets every access history once nothing runs and the
// orchestration has waited for everything that ran: from then on every
// earlier access happens before every later one, so keeping them would
// only cost memory (and the vector clocks would grow with every task ever
// run). What bytes were written is kept, for uninitialised reads.
func (d *Detector) maybeQuiesce() {
	if d.live > 1 || d.queued > 0 { // the orchestration itself is live
		return
	}
	for _, e := range d.ended {
		if d.main.vc.get(e.id) < e.clk {
			return
		}
	}
	d.ended = d.ended[:0]
	d.mem.forgetHistory()
	d.signals = map[uintptr]*signal{}
	own := d.main.vc.get(d.main.id) // never decreases: tasks not started hold its epochs
	d.main.vc = vclock{}
	d.main.vc.set(d.main.id, own)
}

// hb reports whether access a happens before whatever c does now.
func (c *Ctx) hb(a *access) bool {
	return a.ctx == c || c.vc.get(a.ctx.id) >= a.clk
}

// SetRank records which rank of which domain c runs as, for reports.
func (c *Ctx) SetRank(desc string) {
	if c.rec != nil {
		c.rec.add(event{kind: evRank, desc: desc})
		return
	}
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if c.rank == "" {
		c.rank = desc
	}
}

// desc is c as reports name it.
func (c *Ctx) desc() string {
	if c.rank != "" {
		return c.who.Desc + ", " + c.rank
	}
	return c.who.Desc
}

// region is named memory: a window, a host tensor, a heap block.
type region struct {
	lo, hi uintptr
	what   string
}

// Name describes [lo, lo+n) as what in reports: fresh memory (a window, a
// host tensor, a heap block just allocated), so what was known of the
// bytes before is forgotten. With written false they count as never
// written (a run-heap block): a read of any of them before a write is an
// uninitialised read.
func (d *Detector) Name(lo uintptr, n int, what string, written bool) {
	d.NameKey(canon(lo, 0), n, what, written)
}

// NameKey is Name of the bytes whose key (Key) starts at key.
func (d *Detector) NameKey(key uintptr, n int, what string, written bool) {
	if n <= 0 {
		return
	}
	d.ForgetKey(key, n)
	d.mu.Lock()
	defer d.mu.Unlock()
	lo, hi := key, key+uintptr(n)
	i := sort.Search(len(d.regions), func(i int) bool { return d.regions[i].lo >= lo })
	d.regions = slices.Insert(d.regions, i, region{lo, hi, what})
	if !written {
		d.mem.markUnwritten(lo, hi)
	}
}

// Forget drops everything known of [lo, lo+n): it was freed, and whoever
// gets it next starts with no history.
func (d *Detector) Forget(lo uintptr, n int) { d.ForgetKey(canon(lo, 0), n) }

// ForgetKey is Forget of the bytes whose key starts at key.
func (d *Detector) ForgetKey(key uintptr, n int) {
	if n <= 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	lo, hi := key, key+uintptr(n)
	d.dropRegions(lo, hi)
	d.forget(lo, hi)
}

func (d *Detector) forget(lo, hi uintptr) {
	d.mem.forget(lo, hi)
	d.plainWrite(lo, hi) // the notifies in it are gone too
}

// dropRegions removes the names of regions that overlap [lo, hi).
func (d *Detector) dropRegions(lo, hi uintptr) {
	out := d.regions[:0]
	for _, r := range d.regions {
		if r.hi <= lo || r.lo >= hi {
			out = append(out, r)
		}
	}
	d.regions = out
}

// RegionSize is the size of the named region whose key starts at key, 0
// if none does.
func (d *Detector) RegionSize(key uintptr) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := sort.Search(len(d.regions), func(i int) bool { return d.regions[i].lo >= key })
	if i < len(d.regions) && d.regions[i].lo == key {
		return int(d.regions[i].hi - d.regions[i].lo)
	}
	return 0
}

// where describes bytes [lo, hi) for a report: their offset in the named
// region holding them, or their address.
func (d *Detector) where(lo, hi uintptr) string {
	i := sort.Search(len(d.regions), func(i int) bool { return d.regions[i].hi > lo })
	if i < len(d.regions) && d.regions[i].lo <= lo {
		r := d.regions[i]
		return fmt.Sprintf("bytes [%d, %d) of %s", lo-r.lo, hi-r.lo, r.what)
	}
	return fmt.Sprintf("bytes [%#x, %#x) of memory no one named", lo, hi)
}

// Access checks and records c's access of kind k to [lo, lo+n), made
// from st by op (the builtin: "write", "comm.peer read").
func (c *Ctx) Access(lo uintptr, n int, k Kind, op string, st Stack) {
	if n <= 0 {
		return
	}
	if c.rec != nil {
		c.AccessAt(c.rec.canon(lo), n, k, op, st)
		return
	}
	c.AccessAt(canon(lo, 0), n, k, op, st)
}

// AccessAt is Access of the bytes whose key (Key, DeviceKey) starts at
// key.
func (c *Ctx) AccessAt(key uintptr, n int, k Kind, op string, st Stack) {
	if n <= 0 {
		return
	}
	if c.rec != nil {
		c.rec.add(event{kind: evAccess, key: key, n: n, k: k, op: op, st: st})
		return
	}
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	d.access(c, key, key+uintptr(n), k, op, st)
}

func (d *Detector) access(c *Ctx, lo, hi uintptr, k Kind, op string, st Stack) {
	a := &access{ctx: c, clk: c.vc.get(c.id), kind: k, lo: lo, hi: hi, op: op, st: st}
	if k == Write && len(d.signals) > 0 {
		d.plainWrite(lo, hi)
	}
	i, j := d.mem.cover(lo, hi)
	for s := i; s < j; s++ {
		d.check(&d.mem.segs[s], a)
	}
	d.mem.coalesce(i, j)
}

// check compares a with the history of one segment it covers, reports
// what races with it, and records it there.
func (d *Detector) check(g *seg, a *access) {
	c := a.ctx
	conflict := func(e *access) bool {
		return (e.kind.writes() || a.kind.writes()) && !(e.kind.atomic() && a.kind.atomic()) && !c.hb(e)
	}
	if g.w != nil && conflict(g.w) {
		d.report(a, g.w, g)
	}
	for _, r := range g.reads {
		if conflict(r) {
			d.report(a, r, g)
		}
	}
	switch a.kind {
	case Read, AtomicRead:
		if !g.written && a.kind == Read {
			d.reportUninit(a, g)
		}
		g.reads = g.addRead(a, c)
	case AtomicWrite:
		// Atomics that are not ordered with it stay in the history, beside
		// it: a plain access later races with each of them.
		keep := make([]*access, 0, len(g.reads)+1)
		for _, r := range g.reads {
			if !c.hb(r) {
				keep = append(keep, r)
			}
		}
		if g.w != nil && g.w.kind == AtomicWrite && !c.hb(g.w) {
			keep = append(keep, g.w)
		}
		g.w, g.reads, g.written = a, keep, true
	default:
		g.w, g.reads, g.written = a, nil, true
	}
	if len(g.reads) > maxReads {
		g.reads = g.reads[len(g.reads)-maxReads:]
		d.dropped = true
	}
}

// maxReads bounds the reads a segment remembers since its last write:
// beyond it the oldest are dropped (and reports say so), which may hide a
// race with one of them.
const maxReads = 8

// Races is how many distinct races (pairs of code locations) and
// uninitialised reads were reported.
func (d *Detector) Races() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.races + d.uninit
}
