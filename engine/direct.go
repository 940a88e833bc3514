package engine

// Direct control (malloc, free, copy_to, copy_from on a chip, and
// engine/remote's remote_* buffer calls) travels the control path, not the
// task queue, so it is ordered against runs here, by where it is called
// from:
//
//   - inside the orchestration function of run r, before r's first submit,
//     the call belongs to r: it waits until every earlier run of the Worker
//     has finished (runs finish in order, so until r is the first), then
//     goes ahead. Bytes an earlier run's kernels write are there to read,
//     and bytes they read are not changed under them.
//   - inside r after r has submitted a task, it is refused: the task may
//     already be touching the bytes.
//   - outside any run, it is refused while any run is in flight: it would
//     see, or change, the bytes half-way through that run.
//
// A deferred release (remote_free, remote_release_import) is not gated: it
// sends nothing while a task still holds the buffer, and frees after.

// DirectControl is a Worker's direct-control surface as seen from one
// place: inside the orchestration function of run (before its first
// submit), or outside any run when run is nil.
type DirectControl struct {
	w   *Worker
	run *Run
}

// DirectIn is w's direct control for a call made inside the orchestration
// function of run r, or, with r nil, outside any run. r must be a run of w.
func (w *Worker) DirectIn(r *Run) DirectControl { return DirectControl{w: w, run: r} }

// directStep is what a direct-control call may do now.
type directStep int

const (
	directGo      directStep = iota // go ahead
	directWait                      // an earlier run is still in flight: wait for it
	directRefused                   // refused: see rule's error
)

// rule decides, under w.mu, what a direct-control call op may do now. It
// changes nothing, so a test can step it directly.
func (d DirectControl) rule(op string) (directStep, error) {
	w, r := d.w, d.run
	if r == nil {
		if n := len(w.runs); n > 0 {
			return directRefused, Errorf(RuntimeError, "%s: %d run(s) still in flight; direct control outside a run cannot be ordered against them, so wait for them first (RunHandle.wait()) or call it inside an orchestration function before its first submit", op, n)
		}
		return directGo, nil
	}
	if r.w != w {
		return directRefused, Errorf(RuntimeError, "%s: run %d is not a run of this Worker", op, r.id)
	}
	if !r.core.Building() {
		return directRefused, Errorf(RuntimeError, "%s: run %d is no longer being built; direct control belongs inside its orchestration function", op, r.id)
	}
	if r.core.Tasks() > 0 {
		return directRefused, afterSubmit(op, r)
	}
	if why := r.core.Cancelled(); why != nil {
		return directRefused, Wrap(why, op)
	}
	if !w.core.Head(&r.core) {
		return directWait, nil
	}
	return directGo, nil
}

// Worker is the Worker d controls.
func (d DirectControl) Worker() *Worker { return d.w }

// Gate blocks until op may go ahead, or returns why it may not. The wait
// for earlier runs is woken when a run finishes or r is cancelled
// (Run.Cancel wakes it), and each time it also checks that the Worker is
// still usable (not closed or poisoned). A role with direct control of its
// own (engine/remote's remote buffers) calls it before each such call.
func (d DirectControl) Gate(op string) error {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if err := w.ready(op); err != nil {
			return err
		}
		step, err := d.rule(op)
		switch step {
		case directGo:
			w.race.direct(d.run)
			return nil
		case directRefused:
			return err
		}
		driver{w}.wait()
	}
}

// Malloc reserves size bytes of device memory on chip worker.
func (d DirectControl) Malloc(op string, worker, size int) (uint64, error) {
	if err := d.Gate(op); err != nil {
		return 0, err
	}
	return d.w.Devices().malloc(op, worker, size)
}

// Free releases device memory on chip worker.
func (d DirectControl) Free(op string, worker int, ptr uint64) error {
	if err := d.Gate(op); err != nil {
		return err
	}
	return d.w.Devices().free(op, worker, ptr)
}

// CopyTo copies host bytes into chip worker's memory at dst.
func (d DirectControl) CopyTo(op string, worker int, dst uint64, src []byte) error {
	if err := d.Gate(op); err != nil {
		return err
	}
	return d.w.Devices().copyTo(op, worker, dst, src)
}

// CopyFrom copies chip worker's memory at src into dst.
func (d DirectControl) CopyFrom(op string, worker int, dst []byte, src uint64) error {
	if err := d.Gate(op); err != nil {
		return err
	}
	return d.w.Devices().copyFrom(op, worker, dst, src)
}

// afterSubmit is the refusal of direct control in run r once r has
// submitted a task.
func afterSubmit(op string, r *Run) error {
	return Errorf(RuntimeError, "%s: direct control cannot follow a task submission in the same run (run %d has submitted %d task(s)); stage every rank (malloc, copy_to) before the first submit, or do it in a later run", op, r.id, r.core.Tasks())
}
