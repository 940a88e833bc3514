package starlib

import (
	"fmt"

	"go.starlark.net/starlark"

	"simpler/hal/comm"
	"simpler/internal/halt"
	"simpler/internal/race"
)

// A kernel's comm calls as the race detector sees them: a notify is an
// atomic write that releases, a wait that ends an atomic read that
// acquires the notify it observed, a barrier orders every rank's past
// before every rank's future, and a wait or barrier in progress is a
// blocked context for deadlock detection.

// raceNotify is comm.notify under --race: the store and its record are
// one step of the detector.
func (c *Comm) raceNotify(th *starlark.Thread, rc *race.Ctx, rank int, addr uint64, width int, value int64, op string) error {
	word, err := c.v.Word(rank, addr, width)
	if err != nil {
		return c.v.Notify(rank, addr, width, value, op) // its error says why
	}
	return rc.Notify(race.Addr(word), width, op == "add", value, "comm.notify", stackOf(th), func() (int64, error) {
		if err := c.v.Notify(rank, addr, width, value, op); err != nil {
			return 0, err
		}
		return comm.LoadWord(word), nil
	})
}

// raceWait marks th blocked in comm.wait on the word at addr of this
// rank's window; the func it returns ends that and, once the wait saw
// its value, acquires the notify that left it.
func (c *Comm) raceWait(th *starlark.Thread, addr uint64, width int, value int64, cmp string) func(int64, error) {
	rc := raceOf(th)
	holds, ok := comm.Compare(cmp)
	if rc == nil || !ok {
		return func(int64, error) {}
	}
	word, err := c.v.Word(c.v.Rank(), addr, width)
	if err != nil {
		return func(int64, error) {}
	}
	st := stackOf(th)
	rc.Block(&race.Wait{
		Addr: race.Addr(word), Width: width, Value: value, Cmp: cmp, Rank: c.v.Rank(), St: st,
		Load:  func() int64 { return comm.LoadWord(word) },
		Holds: func(seen int64) bool { return holds(seen, value) },
		Stop:  halt.Of(th).Stop,
	})
	return func(got int64, err error) {
		rc.Unblock()
		if err == nil {
			rc.Waited(race.Addr(word), width, got, "comm.wait", st)
		}
	}
}

// raceBarrier records th's arrival at its domain's next barrier and marks
// it blocked; the func it returns ends that and, once the barrier passed,
// orders th after every rank's arrival.
func (c *Comm) raceBarrier(th *starlark.Thread) func(error) {
	rc := raceOf(th)
	if rc == nil {
		return func(error) {}
	}
	dom := c.domainKey()
	real := c.v.BarrierRound() // before this rank arrives, the barrier cannot pass this round
	round := rc.Arrive(dom, c.v.Rank(), c.v.Size())
	rc.Block(&race.Wait{Barrier: true, Dom: dom, Round: round, Domain: c.v.Name(), Rank: c.v.Rank(), Size: c.v.Size(),
		Passed: func() bool { return c.v.BarrierRound() != real },
		St:     stackOf(th), Stop: halt.Of(th).Stop})
	return func(err error) {
		rc.Unblock()
		if err == nil {
			rc.Leave(dom, round)
		}
	}
}

// domainKey names this allocation of the domain for the detector: rank
// 0's window as every process knows it (race.Key), which no other live
// domain shares, with the allocation's id and name, which tell apart the
// domains that reuse one window's memory one after another.
func (c *Comm) domainKey() string {
	var at uintptr
	if base, err := c.v.Base(0); err == nil {
		if b, err := c.chip.ctx.Chip.Bytes(base, 1); err == nil {
			at = race.Key(race.Addr(b))
		}
	}
	return fmt.Sprintf("%#x/%d/%s", at, c.v.AllocationID(), c.v.Name())
}
