package engine

import (
	"fmt"
	"runtime/debug"
	"sync"
)

// endpoint is one NEXT_LEVEL or SUB worker in thread mode: a goroutine
// that runs one assignment at a time. Its channel holds at most one
// assignment, because the scheduler only assigns to idle endpoints.
type endpoint struct {
	pool  Pool
	id    int
	ch    chan Assignment
	local any // the binding's per-endpoint state (a Starlark thread)
	wg    *sync.WaitGroup
	chip  ChipCtx // reused by every kernel this endpoint runs
}

func (w *Worker) startEndpoints() {
	wg := &sync.WaitGroup{}
	start := func(p Pool, id int) *endpoint {
		ep := &endpoint{pool: p, id: id, ch: make(chan Assignment, 1), wg: wg}
		if p == NextLevel && w.IsRemote(id) {
			return ep // route sends its tasks (sendRemote)
		}
		wg.Add(1)
		go w.serve(ep)
		return ep
	}
	for i := 0; i < w.nextCount(); i++ {
		w.next = append(w.next, start(NextLevel, i))
	}
	for i := 0; i < w.cfg.NumSubWorkers; i++ {
		w.subs = append(w.subs, start(Sub, i))
	}
}

// stopEndpoints ends the endpoint goroutines; no task may be in flight.
func (w *Worker) stopEndpoints() {
	var wg *sync.WaitGroup
	for _, ep := range append(w.next, w.subs...) {
		close(ep.ch)
		wg = ep.wg
	}
	if wg != nil {
		wg.Wait()
	}
	w.next, w.subs = nil, nil
}

func (w *Worker) serve(ep *endpoint) {
	defer ep.wg.Done()
	var out []Assignment
	for a := range ep.ch {
		observed := w.observer != nil
		if observed {
			w.emit(Event{Kind: TaskStarted, Run: a.Task.run.id, Task: a.Task.ID, Member: a.Member, Worker: w.workerName(a.Pool, a.Target), Callable: a.Task.handle.Name()})
		}
		err := w.exec(ep, a)
		if observed {
			w.emit(Event{Kind: TaskFinished, Run: a.Task.run.id, Task: a.Task.ID, Member: a.Member, Worker: w.workerName(a.Pool, a.Target), Callable: a.Task.handle.Name(), Err: err})
		}
		w.mu.Lock()
		eff := Effects{Assign: out[:0]}
		w.core.complete(a, err, &eff)
		w.wake(eff)
		w.mu.Unlock()
		out = eff.Assign
		w.route(out)
		if eff.Fenced != nil {
			w.finish(eff.Fenced)
		}
	}
}

// route hands assignments to their endpoints. The scheduler marked each
// endpoint busy, so its channel is empty and the send cannot block. A
// remote node's task is sent from here.
func (w *Worker) route(out []Assignment) {
	for _, a := range out {
		switch {
		case a.Pool == Sub:
			w.subs[a.Target].ch <- a
		case w.IsRemote(a.Target):
			w.sendRemote(a)
		default:
			w.next[a.Target].ch <- a
		}
	}
}

// sendRemote sends a task to its remote node. The node's reader completes
// it, so no goroutine waits for the reply.
func (w *Worker) sendRemote(a Assignment) {
	t := a.Task
	if w.observer != nil {
		w.emit(Event{Kind: TaskStarted, Run: t.run.id, Task: t.ID, Member: a.Member, Worker: w.workerName(a.Pool, a.Target), Callable: t.handle.Name()})
	}
	err := w.remotes[a.Target].start(t.handle, &t.args[a.Member], &t.cfg, func(err error) func() { return w.remoteDone(a, err) })
	if err != nil { // not sent: complete it off this goroutine, which may hold a caller's state
		w.remoteFailed.Add(1)
		go func() {
			defer w.remoteFailed.Done()
			if after := w.remoteDone(a, err); after != nil {
				after()
			}
		}()
	}
}

// remoteDone completes a remote task. Finishing a fenced run may need
// replies from remote nodes, so it is returned to run once the caller can
// block.
func (w *Worker) remoteDone(a Assignment, err error) (after func()) {
	t := a.Task
	if w.observer != nil {
		w.emit(Event{Kind: TaskFinished, Run: t.run.id, Task: t.ID, Member: a.Member, Worker: w.workerName(a.Pool, a.Target), Callable: t.handle.Name(), Err: err})
	}
	w.mu.Lock()
	var eff Effects
	w.core.complete(a, err, &eff)
	w.wake(eff)
	w.mu.Unlock()
	w.route(eff.Assign)
	r := eff.Fenced
	if r == nil {
		return nil
	}
	if w.finishesLocally(r) {
		w.finish(r)
		return nil
	}
	return func() { w.finish(r) }
}

// workerName names an endpoint the way errors show it.
func (w *Worker) workerName(p Pool, id int) string {
	switch {
	case p == Sub:
		return fmt.Sprintf("sub_worker %d", id)
	case w.IsRemote(id):
		return fmt.Sprintf("remote_worker %d", id)
	case w.cfg.Level >= 4:
		return fmt.Sprintf("child_worker %d", id)
	default:
		return fmt.Sprintf("chip_worker %d (device %d)", id, w.cfg.DeviceIDs[id])
	}
}

// exec runs one assignment, turning a panic into a task failure.
func (w *Worker) exec(ep *endpoint, a Assignment) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = Errorf(RuntimeError, "panic: %v\n%s", p, debug.Stack())
		}
	}()
	t := a.Task
	args := &t.args[a.Member]
	switch {
	case a.Pool == Sub && w.subProcs != nil:
		return w.subProcs[a.Target].run(opRunSub, t.handle, args, nil)
	case a.Pool == Sub:
		return t.handle.Callable.(SubCallable).RunSub(&SubCtx{WorkerID: ep.id, Local: &ep.local}, args)
	case w.chipProcs != nil:
		return w.chipProcs[a.Target].run(opRunChip, t.handle, args, nil)
	case w.nodeProcs != nil:
		return w.nodeProcs[a.Target].run(opRunOrch, t.handle, args, &t.cfg)
	case w.cfg.Level >= 4:
		oc := t.handle.Callable.(OrchCallable)
		cfg := t.cfg
		_, err := w.children[a.Target].Run(func(o *Orchestrator) (any, error) {
			return nil, oc.RunOrch(o, args, &cfg)
		})
		return err
	default:
		ep.chip = ChipCtx{WorkerID: a.Target, Chip: w.chips[a.Target], Local: &ep.local}
		return runKernel(&ep.chip, t.handle.Callable.(ChipKernel), args)
	}
}

// wake wakes the goroutines waiting on the task window, a drain or heap
// space when a core step says something they wait for changed. Caller
// holds w.mu.
func (w *Worker) wake(eff Effects) {
	if eff.Wake && w.waiters > 0 {
		w.cond.Broadcast()
	}
}
