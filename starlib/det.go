package starlib

import (
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	starlarktime "go.starlark.net/lib/time"
	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/hal/comm"
	"simpler/hal/shm"
	"simpler/internal/dsched"
	"simpler/internal/halt"
)

// A script under --seed (Session.Det): its main thread is the schedule's
// first process, every kernel and SUB callable a process of its own
// (engine/det.go), and what they do reaches the schedule here:
//
//   - every tensor access of a builtin, every comm.notify, and every
//     detSteps Starlark steps is a scheduling point (a spinning loop
//     cannot hold the token);
//   - comm.wait and comm.barrier block in the schedule, their timeouts in
//     virtual time;
//   - time.now() is the virtual clock (from a fixed epoch), so that a
//     replay prints what the first run printed.

// Schedule is how a session's schedule is made (Session.Schedule).
type Schedule struct {
	Seed     uint64
	Strategy string // "pct" (the default) or "random"
	Depth    int    // PCT's depth; 0: dsched.DefaultPCTDepth
	Trace    func(dsched.Decision)
}

// Schedule puts the script under a deterministic schedule: from now on
// its Workers' members and waits, and the calling goroutine (the main
// thread, which becomes the schedule's first process), run one at a
// time in the order seed decides. Objects are mapped at deterministic
// addresses from now on too. A deadlock is reported on Stderr.
func (s *Session) Schedule(c Schedule) error {
	if s.Det != nil {
		return errorf(engine.ValueError, "the script already runs under seed %d", s.detSeed)
	}
	var strat dsched.Strategy = dsched.NewRandom(c.Seed)
	if c.Strategy == "" || c.Strategy == "pct" {
		depth := c.Depth
		if depth == 0 {
			depth = dsched.DefaultPCTDepth
		}
		pct, err := dsched.NewPCT(c.Seed, depth, dsched.DefaultPCTSteps)
		if err != nil {
			return err
		}
		strat = pct
	}
	sched := dsched.New(strat, dsched.Options{
		OnDeadlock: func(waits []dsched.Wait) { s.reportDeadlock(c.Seed, waits) },
		Trace:      c.Trace,
		Quantum:    detQuantum,
	})
	s.Det, s.detSeed = engine.NewDet(sched), c.Seed
	shm.PlaceDeterministically() // host addresses repeat in a replay too
	return nil
}

// detQuantum is the virtual time a scheduling decision takes: about what
// the detSteps Starlark steps between two points take for real, so that
// a timeout in a script fires after about as much work as it would.
const detQuantum = 100 * time.Microsecond

// reportDeadlock prints a deadlock the schedule found: nothing can run.
// When a wait has a deadline, the earliest then times out.
func (s *Session) reportDeadlock(seed uint64, waits []dsched.Wait) {
	var b strings.Builder
	fmt.Fprintf(&b, "==================\nDEADLOCK (seed %d): no process can run\n", seed)
	var ends time.Duration
	for _, w := range waits {
		fmt.Fprintf(&b, "  %s\n      waits in %s", w.Proc, w.What)
		if w.Deadline > 0 {
			fmt.Fprintf(&b, " (times out at %v of virtual time)", w.Deadline)
			if ends == 0 || w.Deadline < ends {
				ends = w.Deadline
			}
		}
		b.WriteString("\n")
	}
	if ends > 0 {
		fmt.Fprintf(&b, "Virtual time jumps to %v, where the first of these waits times out.\n", ends)
	}
	b.WriteString("==================\n")
	s.outMu.Lock()
	defer s.outMu.Unlock()
	io.WriteString(s.Stderr, b.String())
}

// workerSeed is Worker(seed = S): the script puts itself under the
// schedule of seed S, as --seed S does, before its first Worker; with
// --seed it must name the same seed.
func (s *Session) workerSeed(th *starlark.Thread, v starlark.Value) error {
	if v == starlark.None {
		return nil
	}
	var seed64 uint64
	if err := starlark.AsInt(v, &seed64); err != nil {
		return errorf(engine.ValueError, "Worker: seed must be a non-negative int below 2^64, got %s", v)
	}
	switch {
	case s.Det != nil && s.detSeed == seed64:
		return nil
	case s.Det != nil:
		return errorf(engine.ValueError, "Worker: seed=%d, but the script runs under seed %d already", seed64, s.detSeed)
	case len(s.workers) > 0 || th != s.main:
		return errorf(engine.ValueError, "Worker: seed= puts the whole script under one schedule: give it to the first Worker, made in main() (or run with simpler run --seed %d)", seed64)
	}
	if err := s.Schedule(Schedule{Seed: seed64}); err != nil {
		return err
	}
	p, err := s.Det.S.Main("main")
	if err != nil {
		return err
	}
	s.detMain = p
	activeDet.Store(s.Det)
	s.detThread(th, s.loader.maxSteps, fmt.Sprintf("RuntimeError: too many steps (--max-steps %d)", s.loader.maxSteps))
	return nil
}

// detSteps is how many Starlark steps a thread runs between scheduling
// points when it reaches none of its own.
const detSteps = 1000

// detThread makes th a thread of the schedule: it yields every detSteps
// steps (within the --max-steps bound, if any) and reads virtual time.
func (s *Session) detThread(th *starlark.Thread, bound uint64, reason string) {
	d := s.Det
	next := func() uint64 {
		n := th.Steps + detSteps
		if bound != 0 && bound < n {
			n = bound
		}
		return n
	}
	th.SetMaxExecutionSteps(next())
	th.OnMaxSteps = func(th *starlark.Thread) {
		if bound != 0 && th.Steps >= bound {
			th.Cancel(reason)
			return
		}
		d.Yield("steps")
		th.SetMaxExecutionSteps(next())
	}
	starlarktime.SetNow(th, func() (time.Time, error) { return d.Clock(), nil })
}

// activeDet is the schedule of the script this process runs under
// --seed, nil otherwise: builtins reach it without knowing their session
// (one process runs one scheduled script).
var activeDet atomic.Pointer[engine.Det]

// detPoint is a scheduling point, under --seed.
func detPoint(point string) {
	if d := activeDet.Load(); d != nil {
		d.Yield(point)
	}
}

// detWait is comm.wait under the schedule: the kernel blocks until the
// word holds cmp value, the task is stopped, or timeout passes in
// virtual time.
func (c *Comm) detWait(d *engine.Det, th *starlark.Thread, addr uint64, width int, value int64, cmp string, timeout time.Duration) (int64, error) {
	holds, ok := comm.Compare(cmp)
	word, err := c.v.Word(c.v.Rank(), addr, width)
	if !ok || err != nil || c.v.Alive("comm.wait") != nil || timeout <= 0 { // the real call says why
		return c.v.WaitStop(addr, width, value, cmp, timeout, halt.Of(th))
	}
	stop := halt.Of(th)
	what := fmt.Sprintf("comm.wait on domain %q rank %d: the word at %#x until it is %s %d", c.v.Name(), c.v.Rank(), addr, cmp, value)
	timedOut, err := d.Block(what, func() bool { return holds(comm.LoadWord(word), value) || stop.Stopped() }, timeout)
	seen := comm.LoadWord(word)
	switch {
	case err != nil:
		return seen, err
	case holds(seen, value):
		return seen, nil
	case stop.Stopped():
		return seen, stop.Err("comm.wait")
	case timedOut:
		return seen, c.v.WaitTimeout(timeout, cmp, value, seen)
	}
	return seen, nil
}

// detBarrier is comm.barrier under the schedule: the rank arrives, then
// blocks until every rank has, the task is stopped, or timeout passes in
// virtual time (it then withdraws, as the real barrier does).
func (c *Comm) detBarrier(d *engine.Det, th *starlark.Thread, timeout time.Duration) error {
	if err := c.v.Alive("comm.barrier"); err != nil || timeout <= 0 {
		return c.v.BarrierStop(timeout, halt.Of(th)) // it says why
	}
	round, passed := c.v.BarrierArrive()
	if passed {
		return nil
	}
	stop := halt.Of(th)
	what := fmt.Sprintf("comm.barrier of domain %q as rank %d of %d", c.v.Name(), c.v.Rank(), c.v.Size())
	_, err := d.Block(what, func() bool { return c.v.BarrierRound() != round || stop.Stopped() }, timeout)
	if c.v.BarrierRound() != round {
		return nil
	}
	if err == nil {
		err = stop.Err("comm.barrier")
	}
	return c.v.BarrierGiveUp(round, timeout, err)
}
