package main

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/internal/halt"
	"simpler/starlib"
)

// Ctrl-C while a statement runs: the statement's thread is cancelled, and
// so are the runs it started, which it may be waiting for (a Starlark
// thread blocked in a run's Wait does not see its own cancellation). The
// thread's stop signal (internal/halt) fires too, as for a script's main
// on SIGINT: a builtin the statement is in (a long matmul) sees no
// interpreter step, and returns only when it polls that signal.
//
// The REPL knows the run it made for a statement that uses orch. Runs the
// statement started itself (w.run, w.submit) it knows only by their events:
// the engine cancels those by worker (CancelRuns), which also ends any
// other run in progress on that worker. A second Ctrl-C during the same
// statement cancels every run of every worker: the statement may be
// waiting for a run an earlier statement started.

// statement is the chunk or command being executed.
type statement struct {
	seq  int
	th   *starlark.Thread // nil for a meta-command
	stop *halt.Signal     // th's stop signal, bound to it (nil with th)
	open runKey           // the open run (:begin), which one Ctrl-C leaves alone

	// Under repl.mu:
	run        *engine.Run    // the run the REPL made for the statement, or :end's
	runWorker  *engine.Worker // run's worker
	interrupts int
	cancelled  map[runKey]unfinished // the runs Ctrl-C cancelled → their unfinished tasks then
}

// runKey names a run: its worker's index in the session, its id there.
type runKey struct {
	worker int
	id     uint64
}

// runRec is what the REPL knows of a run in progress from its events.
type runRec struct {
	worker  *replWorker
	stmt    int          // the statement during which its first task was submitted
	tasks   int          // submitted
	started map[int]bool // tasks with a member started
	done    map[int]bool // tasks with a member finished
}

// unfinished counts a run's tasks that had not finished when Ctrl-C
// cancelled it: those running then, and those still waiting to start.
type unfinished struct {
	running, waiting int
}

// unfinished is what rec says is not finished yet.
func (rec *runRec) unfinished() unfinished {
	var u unfinished
	for id := range rec.started {
		if !rec.done[id] {
			u.running++
		}
	}
	seen := len(rec.started)
	for id := range rec.done {
		if !rec.started[id] {
			seen++
		}
	}
	u.waiting = rec.tasks - seen
	return u
}

// String is "1 task running, 2 waiting", "" when nothing is unfinished.
func (u unfinished) String() string {
	var parts []string
	if u.running > 0 {
		parts = append(parts, fmt.Sprintf("%d running", u.running))
	}
	if u.waiting > 0 {
		parts = append(parts, fmt.Sprintf("%d waiting", u.waiting))
	}
	if len(parts) == 0 {
		return ""
	}
	// The noun goes after the first count: "1 task running, 2 waiting".
	count, state, _ := strings.Cut(parts[0], " ")
	noun := "tasks"
	if count == "1" {
		noun = "task"
	}
	parts[0] = count + " " + noun + " " + state
	return strings.Join(parts, ", ")
}

// trackRun records a task event of worker rw.
func (r *repl) trackRun(rw *replWorker, e engine.Event) {
	key := runKey{rw.index, e.Run}
	rec := r.runs[key]
	switch e.Kind {
	case engine.TaskSubmitted:
		if rec == nil {
			rec = &runRec{worker: rw, started: map[int]bool{}, done: map[int]bool{}}
			if r.stmt != nil {
				rec.stmt = r.stmt.seq
			}
			r.runs[key] = rec
		}
		rec.tasks++
	case engine.TaskStarted:
		if rec != nil {
			rec.started[e.Task] = true
		}
	case engine.TaskFinished:
		if rec != nil {
			rec.done[e.Task] = true
		}
	case engine.RunFenced:
		delete(r.runs, key)
	}
}

// begin makes the statement that th (nil for a command) is about to run.
func (r *repl) begin(th *starlark.Thread) *statement {
	r.seq++
	st := &statement{seq: r.seq, th: th, cancelled: map[runKey]unfinished{}}
	if th != nil {
		st.stop = new(halt.Signal)
		halt.Bind(th, st.stop)
	}
	r.mu.Lock()
	if r.open != nil {
		for _, rw := range r.workers {
			if rw.w == r.open.worker {
				st.open = runKey{rw.index, r.open.id}
			}
		}
	}
	r.stmt = st
	r.mu.Unlock()
	return st
}

// end ends the statement; it reports whether Ctrl-C interrupted it. It
// returns once no Ctrl-C is cancelling anything of it, so that a late one
// cannot reach what the next statement starts.
func (r *repl) end(st *statement) bool {
	r.mu.Lock()
	r.stmt = nil
	r.mu.Unlock()
	r.interrupting.Wait()
	return st.interrupts > 0
}

// setRun records the run the REPL made for st.
func (r *repl) setRun(st *statement, run *engine.Run, w *engine.Worker) {
	r.mu.Lock()
	st.run, st.runWorker = run, w
	late := st.interrupts > 0
	r.mu.Unlock()
	if late { // Ctrl-C came first
		run.Cancel()
	}
}

// interrupt is Ctrl-C: it cancels the running statement and its runs.
// Engine calls are made without r.mu, which the workers' observers take
// under the workers' locks.
func (r *repl) interrupt() {
	r.mu.Lock()
	st := r.stmt
	if st == nil {
		r.mu.Unlock()
		return
	}
	r.interrupting.Add(1)
	defer r.interrupting.Done()
	st.interrupts++
	run, workers := st.run, r.toCancel(st)
	others := 0 // runs in progress that this Ctrl-C leaves alone
	for key := range r.runs {
		if _, ok := st.cancelled[key]; !ok && key != st.open {
			others++
		}
	}
	r.mu.Unlock()
	if run == nil && len(workers) == 0 && others > 0 {
		// The statement may be waiting for one of them (r.wait()).
		fmt.Fprintf(r.errOut, "the statement started no run; Ctrl-C again cancels every run (%d in progress)\n", others)
	}

	if st.th != nil {
		st.th.Cancel("cancelled (Ctrl-C)")
		st.stop.Stop("cancelled (Ctrl-C)") // a builtin the statement is in returns too
	}
	if run != nil {
		run.Cancel()
	}
	for _, rw := range workers {
		rw.w.CancelRuns()
	}
}

// toCancel returns the workers whose runs Ctrl-C cancels besides st's own
// run: those where st started one (every worker, the second time), and
// records in st what is cancelled. Called with r.mu held.
func (r *repl) toCancel(st *statement) []*replWorker {
	var own *runKey
	for _, rw := range r.workers {
		if st.run != nil && rw.w == st.runWorker {
			own = &runKey{rw.index, st.run.ID()}
			st.cancelled[*own] = unfinished{} // no task yet, unless its record says otherwise
		}
	}
	chosen := map[*replWorker]bool{}
	for key, rec := range r.runs {
		mine := rec.stmt == st.seq && (own == nil || key != *own) && key != st.open
		if st.interrupts > 1 || mine {
			chosen[rec.worker] = true
		}
	}
	var workers []*replWorker
	for _, rw := range r.workers {
		if st.interrupts > 1 || chosen[rw] {
			workers = append(workers, rw)
		}
	}
	for key, rec := range r.runs {
		if chosen[rec.worker] || st.interrupts > 1 || own != nil && key == *own {
			st.cancelled[key] = rec.unfinished()
		}
	}
	return workers
}

// cancelLine is the line printed after an interrupted statement: what
// Ctrl-C cancelled. err is the statement's error.
func (r *repl) cancelLine(st *statement, err error) string {
	r.mu.Lock()
	keys := make([]runKey, 0, len(st.cancelled))
	for k := range st.cancelled {
		keys = append(keys, k)
	}
	pending := st.cancelled
	r.mu.Unlock()
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].worker != keys[j].worker {
			return keys[i].worker < keys[j].worker
		}
		return keys[i].id < keys[j].id
	})
	var parts []string
	for _, k := range keys {
		part := fmt.Sprintf("run %d", k.id)
		if name := r.workerName(k.worker); name != "w" {
			part += " of " + name
		}
		if u := pending[k].String(); u != "" {
			part += " (" + u + ")"
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return "cancelled: the statement" + where(err)
	}
	return "cancelled: " + strings.Join(parts, ", ")
}

// where says where a cancelled statement stopped: ", in spin at
// <repl 1>:4:9", or "".
func where(err error) string {
	var ee *starlark.EvalError
	if !errors.As(err, &ee) || len(ee.CallStack) == 0 {
		return ""
	}
	for i := range ee.CallStack {
		fr := ee.CallStack.At(i)
		switch {
		case fr.Pos.Filename() == "<builtin>":
			continue
		case fr.Name == "<toplevel>" || fr.Name == "<expr>":
			return fmt.Sprintf(", at %s", fr.Pos)
		}
		return fmt.Sprintf(", in %s at %s", fr.Name, fr.Pos)
	}
	return ""
}

// workerName names the session's worker of index i: the global that
// holds it (w for the REPL's own), else "Worker i".
func (r *repl) workerName(i int) string {
	r.mu.Lock()
	var ew *engine.Worker
	for _, rw := range r.workers {
		if rw.index == i {
			ew = rw.w
		}
	}
	r.mu.Unlock()
	var names []string
	for name, v := range r.env.Globals() {
		if w, ok := v.(*starlib.Worker); ok && w.Engine() == ew {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	switch {
	case slices.Contains(names, "w"):
		return "w"
	case len(names) > 0:
		return names[0]
	}
	return fmt.Sprintf("Worker %d", i)
}
