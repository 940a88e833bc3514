package proc

import (
	"sync"
	"time"

	"simpler/engine"
	"simpler/wire"
)

// The liveness of a child process: a task the engine stops (cancelled,
// past its deadline) is asked to stop on the control lane; a child that
// does not stop it within killGrace is killed, and started again before
// its slot's next task, with the Worker's registrations.

// killGrace is how long a child may take to stop a task it was asked to
// stop before it is killed: the engine's grace for every endpoint.
const killGrace = engine.StopGrace

// begin numbers the next task sent on the task lane.
func (p *process) begin() uint64 {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	p.sent++
	p.running = p.sent
	return p.sent
}

// end records that task n came back.
func (p *process) end(n uint64) {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	if p.running == n {
		p.running = 0
	}
}

// stillRunning reports whether task n has not come back yet.
func (p *process) stillRunning(n uint64) bool {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	return p.running == n
}

// cancel asks the child to stop task n and kills it if n is still
// running killGrace later. It does not wait.
func (p *process) cancel(n uint64, reason string) {
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		r := wire.MailboxControl{Op: wire.OpCancel, Task: n, Reason: truncate(reason, wire.MaxReason)}
		p.controlWithin(killGrace, r.Encode)
		deadline := time.Now().Add(killGrace)
		for p.stillRunning(n) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // polling the task lane's bookkeeping
		}
		if p.stillRunning(n) {
			p.Kill()
		}
	}()
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Run runs a task member in the child and waits for it, stoppable by
// stop, after bringing the child back if an earlier stop had to kill it.
// A child that died or was killed while the task ran fails it naming why.
func (p *process) Run(h *engine.Handle, args *engine.TaskArgs, cfg *engine.CallConfig, stop *engine.Stopper) error {
	_, err := p.runMember(h, args, cfg, stop, 0)
	return err
}

// RunRecorded is Run with the member recorded for the parent's race
// detector, the chip's own memory keyed with tag: it returns the child's
// access log.
func (p *process) RunRecorded(h *engine.Handle, args *engine.TaskArgs, stop *engine.Stopper, tag uintptr) ([]byte, error) {
	return p.runMember(h, args, nil, stop, tag)
}

func (p *process) runMember(h *engine.Handle, args *engine.TaskArgs, cfg *engine.CallConfig, stop *engine.Stopper, raceTag uintptr) ([]byte, error) {
	if p.alive() != nil {
		if err := p.restart(); err != nil {
			return nil, err
		}
	}
	n := p.begin()
	defer p.end(n)
	stop.OnStop(func(reason string) { p.cancel(n, reason) })
	unwatch := p.watchHealth(p.health)
	log, err := p.run(h, args, cfg, raceTag)
	unwatch()
	if why := p.deathReason(); why != nil && err != nil {
		return nil, why
	}
	return log, err
}

// restart starts the child again and ships it every callable its Worker
// has registered.
func (p *process) restart() error {
	p.cur.Load().mb.seg.Close()
	if err := p.spawn(time.Now().Add(p.startup)); err != nil {
		return engine.Wrap(err, "restarting after a kill")
	}
	if p.registered == nil {
		return nil
	}
	for _, c := range p.registered() {
		if err := p.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// A busy child's health: the parent pings it on the control lane
// probesPerTimeout times per health timeout, and counts its silence from
// its last answer, not from the probe: a probe waits only until the last
// answer plus the timeout. So a child that stops answering (SIGSTOP) is
// killed within the timeout of the last moment it was known alive, never
// later. (Probing every third of the timeout with a full timeout for each
// probe noticed it only after up to 4/3 of the bound.) engine/remote's
// healthWatch does the same for a remote node from the bytes it reads.

// probesPerTimeout is how many pings a busy child is sent per timeout; a
// live child answers each at once, so it is heard from that often.
const probesPerTimeout = 4

// childWatch is the clock arithmetic of a busy child's watch: when the
// next ping is sent and until when it may wait. Times are durations since
// the watch began on one monotonic clock. It does no I/O, so tests step it
// directly.
type childWatch struct {
	timeout time.Duration
	heard   time.Duration // silence is counted from here: the last answer, or the watch's start
}

func newChildWatch(timeout time.Duration) *childWatch {
	return &childWatch{timeout: timeout}
}

// every is how long the watch waits between pings.
func (w *childWatch) every() time.Duration {
	return max(w.timeout/probesPerTimeout, time.Millisecond)
}

// deadline is when a ping sent now must have been answered: the end of
// the silence a child is allowed.
func (w *childWatch) deadline() time.Duration { return w.heard + w.timeout }

// answered records an answer at now and returns how long to wait before
// the next ping.
func (w *childWatch) answered(now time.Duration) time.Duration {
	w.heard = now
	return w.every()
}

// laneBusy records that at now another control request held the lane, so
// no ping was sent. That request has a deadline of its own (a child that
// does not answer it is killed), so the child's silence is counted anew
// from now.
func (w *childWatch) laneBusy(now time.Duration) time.Duration {
	w.heard = now
	return w.every()
}

// watchHealth watches p while it runs a task (childWatch). A child that
// does not answer within timeout of its last answer is killed, and the
// task fails naming why. It returns the function that ends the watch. A
// timer, not a goroutine, waits between pings: most tasks end before the
// first.
func (p *process) watchHealth(timeout time.Duration) func() {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	start := time.Now()
	w := newChildWatch(timeout)
	probe := func() {
		busy, err := p.ping(start.Add(w.deadline()))
		if err != nil && engine.KindOf(err) == engine.TimeoutError {
			p.declareDead(engine.Errorf(engine.RuntimeError, "%s: child process %d stopped answering (silent for the health timeout, %v); it was killed", p.name, p.pid(), timeout))
			return
		}
		now := time.Since(start)
		next := w.answered(now)
		if busy {
			next = w.laneBusy(now)
		}
		mu.Lock()
		if !stopped {
			t.Reset(next)
		}
		mu.Unlock()
	}
	mu.Lock()
	t = time.AfterFunc(w.every(), probe)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// ping sends a health probe that must be answered by deadline, unless the
// control lane is busy (busy is then true).
func (p *process) ping(deadline time.Time) (busy bool, err error) {
	if !p.lanes[laneControl].TryLock() {
		return true, nil
	}
	defer p.lanes[laneControl].Unlock()
	in := p.cur.Load()
	alive := func() error { return in.alive(p.name) }
	if err := alive(); err != nil {
		return false, err
	}
	_, err = in.mb.lanes[laneControl].call([]byte{wire.OpPing}, deadline, alive)
	return false, err
}

// declareDead records why p is being killed and kills it.
func (p *process) declareDead(why error) {
	p.tmu.Lock()
	p.why = why
	p.tmu.Unlock()
	p.Kill()
}

// deathReason is why p was killed by its parent, if it was (nil
// otherwise), cleared by reading it.
func (p *process) deathReason() error {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	why := p.why
	p.why = nil
	return why
}

func (p *process) pid() int { return p.cur.Load().cmd.Process.Pid }
