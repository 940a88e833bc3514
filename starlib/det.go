package starlib

import (
	"fmt"
	"sync/atomic"
	"time"

	starlarktime "go.starlark.net/lib/time"
	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/hal/comm"
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

// detSteps is how many Starlark steps a thread runs between scheduling
// points when it reaches none of its own.
const detSteps = 1000

// detEpoch is what time.now() says at virtual time 0.
var detEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

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
	starlarktime.SetNow(th, func() (time.Time, error) { return detEpoch.Add(d.S.Now()), nil })
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
