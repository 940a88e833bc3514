package dsched

import (
	"encoding/binary"
	"strings"
	"time"

	"simpler/kind"
)

// core is the scheduler's decision logic alone: which Procs exist, which
// of them can run, virtual time, and the record of every decision. It
// does no I/O, touches no channel and starts no goroutine, so tests step
// it directly: spawn Procs, then tell it what the running one did (yield,
// block, exit) and read back who runs next.
//
// Only the goroutine that holds the token calls it (Sched makes sure), so
// it has no lock.
type core struct {
	strat   Strategy
	created int     // Procs ever created: the next one's id
	live    []*Proc // the Procs that have not exited, in id order
	cur     *Proc   // the Proc that holds the token; nil before the first and after the last
	now     time.Duration
	quantum time.Duration // virtual time per decision
	steps   int
	hash    uint64
	trace   func(Decision)

	runnable      []int   // scratch: the runnable ids, for Strategy.Pick
	runnableProcs []*Proc // scratch: the same Procs
}

// procState is where a Proc stands in the schedule.
type procState uint8

const (
	runnable procState = iota // may be picked (created, yielding, or woken)
	blocked                   // waits for ready() or its deadline
	exited
)

// Decision is one scheduling decision, as Options.Trace reports it.
type Decision struct {
	Step     int           // 1, 2, … in the order decisions are made
	Point    string        // the scheduling point ("block" and "exit" for Block and Exit)
	From, To int           // the ids of the Proc that reached the point and of the one picked to run next
	FromName string        // their names
	ToName   string        //
	Now      time.Duration // virtual time once the decision is made
}

// Wait is one blocked Proc in a deadlock report.
type Wait struct {
	ID   int
	Proc string // the Proc's name
	What string // what it waits for, as it told Block
	// Deadline, if not 0, is when this wait times out: the deadlock ends
	// there (virtual time jumps to the earliest), not in an error.
	Deadline time.Duration
}

// FNV-1a, 64 bits.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func newCore(strat Strategy) *core {
	return &core{strat: strat, hash: fnvOffset}
}

func (c *core) mixBytes(b []byte) {
	for _, x := range b {
		c.hash ^= uint64(x)
		c.hash *= fnvPrime
	}
}

func (c *core) mixString(s string) {
	for i := 0; i < len(s); i++ {
		c.hash ^= uint64(s[i])
		c.hash *= fnvPrime
	}
}

func (c *core) mixUint(tag byte, v uint64) {
	var b [9]byte
	b[0] = tag
	binary.LittleEndian.PutUint64(b[1:], v)
	c.mixBytes(b[:])
}

// spawn adds a runnable Proc named name. It does not change who runs:
// the creator keeps the token until its next scheduling point.
func (c *core) spawn(p *Proc) {
	p.id = c.created
	c.created++
	p.state = runnable
	c.live = append(c.live, p)
	c.strat.Created(p.id)
	c.mixUint('g', uint64(p.id))
	c.mixString(p.name)
}

// yield is a scheduling point at which the running Proc stays runnable.
func (c *core) yield(point string) (next *Proc, deadlock []Wait) {
	return c.decide(point)
}

// block makes the running Proc wait until ready() is true (nil: never)
// or, if deadline > 0, until virtual time reaches deadline.
func (c *core) block(what string, ready func() bool, deadline time.Duration) (next *Proc, deadlock []Wait) {
	p := c.cur
	p.state = blocked
	p.what, p.ready, p.deadline = what, ready, deadline
	p.timedOut, p.err = false, nil
	return c.decide("block")
}

// exit ends the running Proc. next is nil once no Proc is left.
func (c *core) exit() (next *Proc, deadlock []Wait) {
	p := c.cur
	p.state = exited
	p.ready = nil
	for i, q := range c.live {
		if q == p {
			c.live = append(c.live[:i], c.live[i+1:]...)
			break
		}
	}
	return c.decide("exit")
}

// decide wakes what can wake, then lets the strategy pick who runs next.
// When nothing can run it moves virtual time to the earliest deadline, or,
// if no blocked Proc has one, declares a deadlock: every blocked Proc
// wakes with the deadlock error, and the waits are returned for the
// report. next is nil only when every Proc has exited.
func (c *core) decide(point string) (next *Proc, deadlock []Wait) {
	c.now += c.quantum
	c.wake()
	c.collect()
	if len(c.runnable) == 0 {
		// Nothing can run: a deadlock, reported at once; if a wait has a
		// deadline, time jumps there and that wait times out, else every
		// wait ends in the deadlock's error.
		waits := c.waits()
		if c.advance() {
			deadlock = waits
		} else {
			deadlock = c.deadlock()
		}
		c.collect()
	}
	if len(c.runnable) == 0 {
		c.cur = nil
		return nil, deadlock
	}
	from, fromName := -1, ""
	if c.cur != nil {
		from, fromName = c.cur.id, c.cur.name
	}
	c.steps++
	c.cur = c.runnableProcs[c.strat.Pick(c.steps, from, c.runnable)]
	to := c.cur.id
	c.mixString(point)
	c.mixUint('>', uint64(to))
	if c.trace != nil {
		c.trace(Decision{Step: c.steps, Point: point, From: from, To: to, FromName: fromName, ToName: c.cur.name, Now: c.now})
	}
	return c.cur, deadlock
}

// wake makes runnable every blocked Proc whose condition holds, or whose
// deadline has come (a condition that holds wins over the deadline).
// Conditions are evaluated in id order, by the token holder.
func (c *core) wake() {
	for _, p := range c.live {
		if p.state != blocked {
			continue
		}
		switch {
		case p.ready != nil && p.ready():
			c.unblock(p, false, nil)
		case p.deadline > 0 && p.deadline <= c.now:
			c.unblock(p, true, nil)
		}
	}
}

func (c *core) unblock(p *Proc, timedOut bool, err error) {
	p.state = runnable
	p.ready = nil
	p.timedOut, p.err = timedOut, err
}

func (c *core) collect() {
	c.runnable = c.runnable[:0]
	c.runnableProcs = c.runnableProcs[:0]
	for _, p := range c.live {
		if p.state == runnable {
			c.runnable = append(c.runnable, p.id)
			c.runnableProcs = append(c.runnableProcs, p)
		}
	}
}

// advance moves virtual time to the earliest deadline of a blocked Proc
// and wakes that Proc (the lowest id among ties) timed out; false if no
// blocked Proc has a deadline.
func (c *core) advance() bool {
	var first *Proc
	for _, p := range c.live {
		if p.state == blocked && p.deadline > 0 && (first == nil || p.deadline < first.deadline) {
			first = p
		}
	}
	if first == nil {
		return false
	}
	if first.deadline > c.now {
		c.now = first.deadline
		c.mixUint('t', uint64(c.now))
	}
	c.unblock(first, true, nil)
	return true
}

// deadlock wakes every blocked Proc with the deadlock error and returns
// their waits in id order; nil if none is blocked (every Proc exited).
func (c *core) deadlock() []Wait {
	waits := c.waits()
	if waits == nil {
		return nil
	}
	err := deadlockError(waits)
	for _, p := range c.live {
		if p.state == blocked {
			c.unblock(p, false, err)
		}
	}
	c.mixUint('d', uint64(len(waits)))
	return waits
}

// waits is every blocked Proc's wait, in id order.
func (c *core) waits() []Wait {
	var waits []Wait
	for _, p := range c.live {
		if p.state == blocked {
			waits = append(waits, Wait{ID: p.id, Proc: p.name, What: p.what, Deadline: p.deadline})
		}
	}
	return waits
}

// deadlockError is what Block returns to each Proc of a deadlock: a
// RuntimeError naming every wait, for which errors.Is(err, ErrDeadlock).
func deadlockError(waits []Wait) error {
	var b strings.Builder
	b.WriteString("deadlock: no process can run and none waits with a deadline: ")
	for i, w := range waits {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(w.Proc)
		b.WriteString(" waits for ")
		b.WriteString(w.What)
	}
	return &kind.Error{Kind: kind.RuntimeError, Msg: b.String(), Cause: ErrDeadlock}
}
