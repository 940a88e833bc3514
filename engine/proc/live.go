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
	if p.alive() != nil {
		if err := p.restart(); err != nil {
			return err
		}
	}
	n := p.begin()
	defer p.end(n)
	stop.OnStop(func(reason string) { p.cancel(n, reason) })
	unwatch := p.watchHealth(p.health)
	err := p.run(h, args, cfg)
	unwatch()
	if why := p.deathReason(); why != nil && err != nil {
		return why
	}
	return err
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

// watchHealth probes p while it runs a task: a ping on the control lane
// every third of timeout (skipped while another control request holds
// the lane, which has a deadline of its own). A child that does not answer
// one within timeout, such as a stopped process, is killed, and the task
// fails naming why. It returns the function that ends the watch. A timer,
// not a goroutine, waits between probes: most tasks end before the first.
func (p *process) watchHealth(timeout time.Duration) func() {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	probe := func() {
		if err := p.ping(timeout); err != nil && engine.KindOf(err) == engine.TimeoutError {
			p.declareDead(engine.Errorf(engine.RuntimeError, "%s: child process %d stopped answering (no health reply within %v); it was killed", p.name, p.pid(), timeout))
			return
		}
		mu.Lock()
		if !stopped {
			t.Reset(timeout / 3)
		}
		mu.Unlock()
	}
	mu.Lock()
	t = time.AfterFunc(timeout/3, probe)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// ping sends a health probe unless the control lane is busy.
func (p *process) ping(timeout time.Duration) error {
	if !p.lanes[laneControl].TryLock() {
		return nil
	}
	defer p.lanes[laneControl].Unlock()
	in := p.cur.Load()
	alive := func() error { return in.alive(p.name) }
	if err := alive(); err != nil {
		return err
	}
	_, err := in.mb.lanes[laneControl].call([]byte{wire.OpPing}, time.Now().Add(timeout), alive)
	return err
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
