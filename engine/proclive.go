package engine

import (
	"time"

	"simpler/wire"
)

// The liveness of a child process: a task the engine stops (cancelled,
// past its deadline) is asked to stop on the control lane; a child that
// does not stop it within killGrace is killed, and started again before
// its slot's next task, with the Worker's registrations.

// killGrace is how long a child may take to stop a task it was asked to
// stop before it is killed.
const killGrace = time.Second

// begin numbers the next task sent on the task lane.
func (p *proc) begin() uint64 {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	p.sent++
	p.running = p.sent
	return p.sent
}

// end records that task n came back.
func (p *proc) end(n uint64) {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	if p.running == n {
		p.running = 0
	}
}

// stillRunning reports whether task n has not come back yet.
func (p *proc) stillRunning(n uint64) bool {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	return p.running == n
}

// cancel asks the child to stop task n and kills it if n is still
// running killGrace later. It does not wait.
func (p *proc) cancel(n uint64, reason string) {
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
			p.kill()
		}
	}()
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// runTask runs a task member in process p, stoppable by e, after bringing
// p back if an earlier stop had to kill it.
func (w *Worker) runTask(e *loopEndpoint, p *proc, op uint8, a Assignment, cfg *CallConfig) error {
	if p.alive() != nil {
		if err := w.restart(p); err != nil {
			return err
		}
	}
	n := p.begin()
	defer p.end(n)
	e.stop.OnStop(func(reason string) { p.cancel(n, reason) })
	t := a.Task
	return p.run(op, t.handle, &t.args[a.Member], cfg)
}

// restart starts p again and ships it every callable registered here.
func (w *Worker) restart(p *proc) error {
	p.cur.Load().mb.seg.Close()
	if err := p.spawn(time.Now().Add(w.cfg.StartupTimeout)); err != nil {
		return Wrap(err, "restarting after a kill")
	}
	w.mu.Lock()
	callables := make([]Callable, 0, len(w.reg.byDigest))
	for _, h := range w.reg.byDigest {
		callables = append(callables, h.Callable)
	}
	w.mu.Unlock()
	for _, c := range callables {
		if err := p.register(c); err != nil {
			return err
		}
	}
	return nil
}
