// Package dsched is simpler's deterministic scheduler, what `--seed`
// runs a process under: every thread of control runs one at a time, in an
// order a seed decides, so that a seed replays an interleaving exactly.
//
// The contract:
//
//   - A Sched owns a set of processes (Proc): the script's main thread,
//     each running task member, each orchestration function. Exactly one
//     Proc holds the token and runs; every other goroutine that belongs
//     to a Proc is parked in this package.
//   - Control passes only at scheduling points, where the running Proc
//     calls Yield, Block or Exit. There the Strategy picks the next Proc
//     among the runnable ones (the running one included, unless it blocks
//     or exits) and the token is handed to it over that Proc's own
//     channel; the goroutine that gave it up parks until it is picked
//     again. No other goroutine ever decides anything, so which Proc runs
//     when depends on the seed and the program alone.
//   - Procs are created only by the running Proc (Go), or by Main for the
//     first: the set of runnable Procs at every point is decided by the
//     schedule, never by which goroutine the OS ran first. A new Proc
//     does not run before its creator reaches a scheduling point; its
//     goroutine calls Start, which parks it until it is picked.
//   - Block makes a Proc wait until a condition holds or, with a
//     deadline, until virtual time reaches it. Conditions are evaluated
//     at every scheduling point, in Proc id order, by the token holder
//     only, so they may read memory the Procs share without a lock. They
//     may read Now, Steps and Hash but must not call a Proc's methods,
//     nor panic (the decision would be left half made); the same goes for
//     the OnDeadlock and Trace hooks.
//   - Time is virtual: Now starts at 0 and moves only when no Proc can
//     run and some blocked Proc has a deadline; it then jumps to the
//     earliest deadline and that Proc (the lowest id among ties) wakes
//     timed out. So a timeout fires at the same point of every replay.
//   - Deadlock is exact: no Proc can run and some wait. The OnDeadlock
//     handler is then called at once with every blocked Proc's wait (id
//     order). If a wait has a deadline, time jumps to the earliest and
//     that wait times out (the program goes on to fail, or recover, as a
//     timeout makes it); if none has, every one of those Blocks returns an
//     error for which errors.Is(err, ErrDeadlock) (a RuntimeError naming
//     the waits): the Procs run on to fail what they were doing.
//   - Hash is an FNV-1a hash of every decision (its point and the Proc
//     picked), every Proc created (id and name) and every jump of virtual
//     time, and Steps counts the decisions: two runs of one program and
//     seed that agree on both made the same schedule. Names and points
//     are hashed, so they must not carry addresses or other values that
//     differ between runs; Block's what is for reports only and is not.
//   - Every method of a Proc is called by that Proc's own goroutine; the
//     state behind Now, Steps and Hash is the token holder's, so they are
//     read by the running Proc, or once Done is closed. A call by a Proc
//     that does not hold the token is refused with a RuntimeError and
//     changes nothing.
//   - Close ends the schedule from any goroutine: every parked goroutine
//     returns ErrClosed at once, and every later call returns ErrClosed
//     without parking, so a Proc's goroutine unwinds instead of waiting.
//     From then on nothing is ordered: the Procs unwind concurrently, and
//     memory they share is theirs to guard.
//     The package starts no goroutine, so once every Proc's goroutine has
//     returned (each has Exited, or returned after ErrClosed), nothing of
//     the Sched is left.
//   - Exit is idempotent and safe to defer. A Proc whose goroutine panics
//     with Exit deferred hands the token on as it unwinds and the others
//     run on; the panic itself goes on up its own goroutine, which must
//     recover it (or the program dies, as for any panic). A Proc whose
//     goroutine returns without Exit holds the token forever: the Sched
//     is wedged until Close.
//
// The decision logic is core, a plain state machine with no channels,
// that the tests step directly; Sched and Proc only move the token
// between goroutines.
package dsched

import (
	"sync"
	"sync/atomic"
	"time"

	"simpler/kind"
)

// ErrDeadlock is what the errors of a deadlock's Blocks wrap.
var ErrDeadlock = kind.New(kind.RuntimeError, "deadlock")

// ErrClosed is returned by every call after Close, and by every parked
// call that Close woke.
var ErrClosed = kind.New(kind.RuntimeError, "dsched: the scheduler was closed")

// Options are a Sched's hooks; both may be nil.
type Options struct {
	// OnDeadlock is called, by the goroutine that found it and before any
	// Proc runs on, with every blocked Proc's wait in id order: nothing
	// could run (a wait with a Deadline then times out).
	OnDeadlock func(waits []Wait)
	// Trace is called at every decision, by the goroutine that made it
	// (for a replay check that names the first step two runs differ at).
	Trace func(Decision)
	// Quantum is the virtual time every decision takes (0: none), so that
	// a Proc that never blocks (a kernel spinning on a flag) still sees
	// deadlines pass, at the same step of every replay.
	Quantum time.Duration
}

// Sched is one deterministic schedule over a set of Procs.
type Sched struct {
	core       *core // the token holder's
	onDeadlock func([]Wait)

	holder    atomic.Pointer[Proc] // who holds the token, for the refusals
	closed    chan struct{}
	closeOnce sync.Once
	done      chan struct{} // closed when the last Proc exits
}

// Proc is one thread of control under a Sched.
type Proc struct {
	s       *Sched
	id      int
	name    string
	wake    chan struct{} // the token, handed over by a send (buffered 1)
	started atomic.Bool
	gone    atomic.Bool // Exit has run: a second one does nothing

	// The token holder's: where the Proc stands (see core).
	state    procState
	what     string
	ready    func() bool
	deadline time.Duration
	timedOut bool
	err      error
}

// New returns a Sched whose decisions strat makes.
func New(strat Strategy, opts Options) *Sched {
	c := newCore(strat)
	c.trace = opts.Trace
	c.quantum = opts.Quantum
	return &Sched{
		core:       c,
		onDeadlock: opts.OnDeadlock,
		closed:     make(chan struct{}),
		done:       make(chan struct{}),
	}
}

// Main makes the calling goroutine the Sched's first Proc, named name,
// holding the token. It is refused once the Sched has a Proc.
func (s *Sched) Main(name string) (*Proc, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	if s.core.created > 0 || s.holder.Load() != nil {
		return nil, kind.Errorf(kind.RuntimeError, "dsched: Main(%q): the schedule has its first process already", name)
	}
	p := &Proc{s: s, name: name, wake: make(chan struct{}, 1)}
	p.started.Store(true)
	s.core.spawn(p)
	s.core.cur = p
	s.holder.Store(p)
	return p, nil
}

// Go registers a new runnable Proc named name, created by p, which must
// hold the token. p keeps running; the new Proc's goroutine (the caller
// starts it) calls Start and parks until the schedule picks it. The new
// Proc is runnable from now on: a caller that then fails to start its
// goroutine wedges the schedule when it is picked (Close frees the rest).
func (p *Proc) Go(name string) (*Proc, error) {
	if err := p.holds("Go"); err != nil {
		return nil, err
	}
	q := &Proc{s: p.s, name: name, wake: make(chan struct{}, 1)}
	p.s.core.spawn(q)
	return q, nil
}

// Start parks the calling goroutine, which runs p, until the schedule
// picks p. It is called once, by a Proc that Go made.
func (p *Proc) Start() error {
	if p.started.Swap(true) {
		return kind.Errorf(kind.RuntimeError, "dsched: %s: Start called twice", p.name)
	}
	return p.park()
}

// Yield is a scheduling point: the strategy picks who runs next, p
// included, and p parks until it is picked again.
func (p *Proc) Yield(point string) error {
	if err := p.holds("Yield"); err != nil {
		return err
	}
	next, deadlock := p.s.core.yield(point)
	return p.handOff(next, deadlock)
}

// Block makes p wait until ready() is true (a nil ready never is) or, if
// deadline > 0, until virtual time reaches deadline, then until it is
// picked. A deadline already reached ends the wait at once (timed out),
// but still at a scheduling point. timedOut says the deadline ended the
// wait. In a deadlock it
// returns an error that wraps ErrDeadlock. what says what p waits for, in
// reports.
func (p *Proc) Block(what string, ready func() bool, deadline time.Duration) (timedOut bool, err error) {
	if err := p.holds("Block"); err != nil {
		return false, err
	}
	next, deadlock := p.s.core.block(what, ready, deadline)
	if err := p.handOff(next, deadlock); err != nil {
		return false, err
	}
	timedOut, err = p.timedOut, p.err
	p.timedOut, p.err = false, nil
	return timedOut, err
}

// Sleep blocks p for d of virtual time; d <= 0 is a plain Yield.
func (p *Proc) Sleep(d time.Duration) error {
	if d <= 0 {
		return p.Yield("sleep")
	}
	if err := p.holds("Sleep"); err != nil {
		return err
	}
	_, err := p.Block("sleep", nil, p.s.core.now+d)
	return err
}

// Exit ends p and hands the token on; p's goroutine then returns without
// parking. A second Exit, and an Exit after Close, does nothing.
func (p *Proc) Exit() error {
	s := p.s
	if s.isClosed() || p.gone.Load() {
		return nil
	}
	if err := p.holds("Exit"); err != nil {
		return err
	}
	p.gone.Store(true)
	next, deadlock := s.core.exit()
	s.report(deadlock)
	s.holder.Store(next)
	if next == nil {
		close(s.done)
		return nil
	}
	next.wake <- struct{}{}
	return nil
}

// Name is the name p was created with.
func (p *Proc) Name() string { return p.name }

// ID is p's number: 0 for Main's, then 1, 2, … in creation order.
func (p *Proc) ID() int { return p.id }

// Running is the Proc that holds the token, nil once every Proc exited.
// Code on a Proc's goroutine gets its own Proc from it.
func (s *Sched) Running() *Proc { return s.holder.Load() }

// Now is the virtual time.
func (s *Sched) Now() time.Duration { return s.core.now }

// Steps is the number of decisions made so far.
func (s *Sched) Steps() int { return s.core.steps }

// Hash is the hash of the schedule so far (see the package comment).
func (s *Sched) Hash() uint64 { return s.core.hash }

// Done is closed once every Proc has exited (never, if the Sched was
// closed first).
func (s *Sched) Done() <-chan struct{} { return s.done }

// Close ends the schedule: every parked goroutine, and every later call,
// returns ErrClosed. It may be called from any goroutine, more than once.
func (s *Sched) Close() {
	s.closeOnce.Do(func() { close(s.closed) })
}

func (s *Sched) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// holds refuses op unless p holds the token of an open Sched.
func (p *Proc) holds(op string) error {
	if p.s.isClosed() {
		return ErrClosed
	}
	if p.s.holder.Load() != p {
		return kind.Errorf(kind.RuntimeError, "dsched: %s by %s, which does not hold the token", op, p.name)
	}
	return nil
}

// handOff passes the token from p to next (after reporting a deadlock
// found on the way) and parks p until it is picked again.
func (p *Proc) handOff(next *Proc, deadlock []Wait) error {
	s := p.s
	s.report(deadlock)
	if next == p {
		return nil
	}
	s.holder.Store(next)
	next.wake <- struct{}{}
	return p.park()
}

// park waits for the token, or for Close.
func (p *Proc) park() error {
	select {
	case <-p.wake:
		return nil
	case <-p.s.closed:
		return ErrClosed
	}
}

func (s *Sched) report(deadlock []Wait) {
	if deadlock != nil && s.onDeadlock != nil {
		s.onDeadlock(deadlock)
	}
}
