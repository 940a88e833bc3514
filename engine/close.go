package engine

// Closing a Worker: draining its runs within close_timeout_s, stopping
// its endpoints, tearing down its tree in order, and what had to be
// forced.

import (
	"fmt"
	"strings"
	"time"

	"simpler/hal/comm"
)

// teardown closes the tree in order: the chips and their processes, the
// SUB workers, the nodes (processes, remote sessions, child workers), the
// launchers of the groups. It holds w.mu only to read the slots and to
// forget them, never across the closing: a remote node's Close waits for
// its reader, whose failure goroutine reports the tasks in flight through
// completed, which takes w.mu; and a kill (a second interrupt) must reach
// what is being closed.
func (t *tree) teardown() error {
	w := t.w
	w.mu.Lock()
	slots, groups := t.slots(), t.liveGroups()
	w.mu.Unlock()
	var first error
	t.remoteFailed.Wait()
	for _, s := range slots {
		if err := s.close(); err != nil && first == nil {
			first = err
		}
	}
	for _, g := range groups { // their ranks ended with their sessions
		if err := g.Close(w.cfg.CloseTimeout); err != nil && first == nil {
			first = err
		}
	}
	w.mu.Lock()
	t.chips, t.nodes, t.subs = nil, nil, nil
	for _, g := range t.groups {
		g.live = nil
	}
	w.mu.Unlock()
	return first
}

// slots lists every slot of the tree, chips first. Caller holds w.mu.
func (t *tree) slots() []slot {
	var ss []slot
	for _, s := range t.chips {
		if s != nil {
			ss = append(ss, s)
		}
	}
	for _, s := range t.subs {
		if s != nil {
			ss = append(ss, s)
		}
	}
	for _, s := range t.nodes {
		if s != nil {
			ss = append(ss, s)
		}
	}
	return ss
}

// Close drains every run, stops endpoints and children and frees chips and
// the heap. It is idempotent.
func (w *Worker) Close() error {
	w.mu.Lock()
	if w.attached && w.state != stateClosed {
		w.mu.Unlock()
		return Errorf(RuntimeError, "close: this worker is a child; its parent closes it")
	}
	w.mu.Unlock()
	return w.closeTree()
}

// drainRuns waits for runs to finish, up to the close timeout; the ones
// still running then are cancelled, and if they do not finish within a
// grace either, the child processes and remote sessions behind them are
// ended. It returns an error naming what had to be forced, or nil.
func (w *Worker) drainRuns(runs []*Run) error {
	if w.cfg.Det != nil && w.cfg.Det.S.Running() != nil {
		return w.detDrainRuns(runs)
	}
	deadline := time.Now().Add(w.cfg.CloseTimeout)
	var late []*Run
	for _, r := range runs {
		select {
		case <-r.done:
		case <-time.After(time.Until(deadline)):
			late = append(late, r)
		}
	}
	if len(late) == 0 {
		return nil
	}
	ids := make([]string, len(late))
	for i, r := range late {
		ids[i] = fmt.Sprint(r.id)
		r.Cancel()
	}
	what := fmt.Sprintf("close: run %s still running after close_timeout_s=%v: cancelled", strings.Join(ids, ", "), w.cfg.CloseTimeout)
	grace := time.After(3 * StopGrace)
	for _, r := range late {
		select {
		case <-r.done:
		case <-grace:
			w.tree.kill()
			return Errorf(RuntimeError, "%s, and still running after that: its child processes and sessions were ended", what)
		}
	}
	return Errorf(RuntimeError, "%s", what)
}

// detDrainRuns is drainRuns under the schedule: the waits are the
// running Proc's, in virtual time.
func (w *Worker) detDrainRuns(runs []*Run) error {
	var late []string
	for _, r := range runs {
		if r.Wait(w.cfg.CloseTimeout); !r.Done() {
			late = append(late, fmt.Sprint(r.id))
			r.Cancel()
			r.Wait(3 * StopGrace)
		}
	}
	if len(late) == 0 {
		return nil
	}
	return Errorf(RuntimeError, "close: run %s still running after close_timeout_s=%v: cancelled", strings.Join(late, ", "), w.cfg.CloseTimeout)
}

// kill ends every child process and remote session of the tree at once,
// so that whatever waits on them returns. It may run while a teardown
// closes them (a second interrupt): it reads the slots under w.mu, which
// a teardown never holds while it closes.
func (t *tree) kill() {
	t.w.mu.Lock()
	slots, groups := t.slots(), t.liveGroups()
	t.w.mu.Unlock()
	for _, s := range slots {
		s.kill()
	}
	for _, g := range groups {
		g.Kill()
	}
}

func (w *Worker) closeTree() error {
	w.regMu.Lock()
	defer w.regMu.Unlock()
	w.mu.Lock()
	if w.state == stateClosed {
		w.mu.Unlock()
		return nil
	}
	runs := make([]*Run, 0, len(w.runs))
	for r := range w.runs {
		if r.core.Building() {
			w.mu.Unlock()
			return Errorf(RuntimeError, "close: run %d is still being built; close() cannot be called from inside an orchestration function", r.id)
		}
		runs = append(runs, r)
	}
	w.state = stateClosed // refuse new work while the runs drain
	w.mu.Unlock()
	forced := w.drainRuns(runs)
	gerr := w.runClose(CloseAfterDrain) // global domains are freed here (engine/global)
	// Endpoints report to w.mu as they stop: wait for them outside it.
	if !w.tree.stopEndpointsWithin(StopGrace) && forced == nil {
		forced = Errorf(RuntimeError, "close: a kernel of this worker did not stop; its goroutine is abandoned")
	}
	werr := w.domains.dropWarm() // before the chips close: parked ranks are mapped in them
	if e := w.runClose(CloseBeforeTeardown); e != nil && werr == nil {
		werr = e
	}
	err := w.tree.teardown()
	if err == nil {
		err = gerr
	}
	if err == nil {
		err = werr
	}
	if forced != nil {
		err = forced // what had to be forced comes first: it says why the rest may be missing
	}
	// The worker is closed and its endpoints stopped: nothing takes these
	// any more, so they are unmapped outside w.mu.
	if e := w.hostBufs.closeAll(); e != nil && err == nil {
		err = e
	}
	if w.domains.commInits.Load() > 0 {
		if e := comm.DrainObjects(); e != nil && err == nil {
			err = e
		}
	}
	w.mu.Lock()
	heap := w.heap
	w.mu.Unlock()
	if heap != nil {
		if e := heap.close(); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// CancelRuns cancels every run of the worker (Run.Cancel): an interrupt
// ends the work in hand without waiting for it.
func (w *Worker) CancelRuns() {
	w.mu.Lock()
	runs := make([]*Run, 0, len(w.runs))
	for r := range w.runs {
		runs = append(runs, r)
	}
	w.mu.Unlock()
	for _, r := range runs {
		r.Cancel()
	}
}

// Kill ends every child process and remote session of the tree at once:
// the forced end of a second interrupt.
func (w *Worker) Kill() { w.tree.kill() }
