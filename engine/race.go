package engine

import (
	"fmt"
	"sync"

	"simpler/engine/internal/core"
	"simpler/internal/race"
)

// What --race (Config.Race) needs from the engine, all here, as the
// methods of a Worker's raceHooks (w.race) and a run's raceRun (r.race).
// Both are nil when the detector is off, and every method of theirs does
// nothing on a nil receiver, so each hook on the task path is one nil
// check.
//
//   - A task member starts after the clock its orchestration released at
//     submit, after the end of every producer upstream's tag rules order
//     it after (Run.order: a read after a write; the edges order_hazards
//     adds are left out, so what upstream would race is reported), and
//     after every earlier run of its Worker (runs dispatch in order).
//   - Its end is taken before its completion is passed on, so whatever
//     the completion releases (a consumer, a drain, the run's end)
//     acquires it.
//   - The detector counts the assignments handed to endpoints and not yet
//     running where it can see them (deadlock detection).
//   - Memory is named where it is made: every rank's window and its
//     buffers at allocation (forgotten at free), run-heap blocks as
//     unwritten (forgotten when reclaimed).

// raceHooks is a Worker's side of the detector.
type raceHooks struct {
	w *Worker
	d *race.Detector

	// done is the end of every run that is done, which later runs' tasks
	// start after; mu guards it.
	mu   sync.Mutex
	done race.Clock
}

// newRaceHooks is w's side of detector d, nil when d is (no --race).
func newRaceHooks(w *Worker, d *race.Detector) *raceHooks {
	if d == nil {
		return nil
	}
	return &raceHooks{w: w, d: d}
}

// raceRun is what the detector keeps of one run.
type raceRun struct {
	mu    sync.Mutex
	orch  *race.Ctx // the context that submitted it
	tasks map[*core.Task]*raceTask
	end   race.Clock // every finished task's end
}

type raceTask struct {
	submit race.Clock
	after  []*core.Task // producers upstream's rules order it after
	end    race.Clock

	// A member that ran in a process: its context and log, kept until
	// every member has ended, then replayed together (raceHooks.replay).
	ctxs  []*race.Ctx
	logs  []*race.RecordedLog
	ended int
}

// begin readies run r for the detector, submitted from ctx (nil: the
// process's orchestration).
func (h *raceHooks) begin(r *Run, ctx *race.Ctx) {
	if h == nil {
		return
	}
	if ctx == nil {
		ctx = h.d.Main()
	}
	r.race = &raceRun{orch: ctx, tasks: map[*core.Task]*raceTask{}}
	r.core.ObserveEdges(r.raceEdge)
}

// RaceCtx is the detector's context of the code building r, nil without
// --race.
func (o *Orchestrator) RaceCtx() *race.Ctx {
	if o.run.race == nil {
		return nil
	}
	return o.run.race.orch
}

// RaceEnd is the clock of every task of r that finished so far; a
// context that waited for r acquires it.
func (r *Run) RaceEnd() race.Clock {
	if r.race == nil {
		return race.Clock{}
	}
	r.race.mu.Lock()
	defer r.race.mu.Unlock()
	return r.race.end
}

// submit records t's submit: it starts after what the orchestration did
// so far.
func (rr *raceRun) submit(t *Task) {
	if rr == nil {
		return
	}
	rt := &raceTask{submit: rr.orch.Release()}
	rr.mu.Lock()
	rr.tasks[&t.Task] = rt
	rr.mu.Unlock()
}

// raceEdge records how t relates to an earlier task p that touched the
// same bytes: ordered after it for a read after a write, otherwise a note
// of upstream's rule for the report.
func (r *Run) raceEdge(t, p *core.Task, h core.Hazard) {
	if h == core.ReadAfterWrite {
		r.race.mu.Lock()
		if rt := r.race.tasks[t]; rt != nil {
			rt.after = append(rt.after, p)
		}
		r.race.mu.Unlock()
		return
	}
	why := "an OUTPUT or OUTPUT_EXISTING (insert-only) does not wait for an earlier writer of its bytes under upstream's tag rules"
	if h == core.WriteAfterRead {
		why = "a writer (OUTPUT, OUTPUT_EXISTING or INOUT) does not wait for an earlier reader of its bytes under upstream's tag rules"
	}
	if r.w.cfg.OrderHazards {
		why += " (order_hazards=True orders them here; upstream would race)"
	}
	r.w.cfg.Race.NoEdge(r.w, r.id, t.ID(), p.ID(), why)
}

// start makes the context of member a as it starts on this process's
// endpoint.
func (h *raceHooks) start(a Assignment) *race.Ctx {
	if h == nil {
		return nil
	}
	w := h.w
	t, r := taskOf(a.Task), runOf(a.Task.Run())
	r.race.mu.Lock()
	rt := r.race.tasks[a.Task]
	after := []race.Clock{rt.submit, h.prev()}
	for _, p := range rt.after {
		if pt := r.race.tasks[p]; pt != nil {
			after = append(after, pt.end)
		}
	}
	r.race.mu.Unlock()
	who := race.Who{
		Desc:  fmt.Sprintf("%s (task %d, member %d, run %d, on %s)", t.handle.Name(), t.ID(), a.Member, r.id, w.workerName(a.Pool, a.Target)),
		Owner: w, Run: r.id, Task: t.ID(), Member: a.Member, Parent: r.race.orch,
	}
	if a.Pool == NextLevel {
		who.Chip = h.chipTag(a.Target)
	}
	c := h.d.Start(who, after...)
	h.d.Queue(-1)
	return c
}

// startRecorded is start for a member a chip's or SUB worker's process
// runs and records: the detector counts it until its replay.
func (h *raceHooks) startRecorded(a Assignment) *race.Ctx {
	c := h.start(a)
	if c != nil {
		h.d.Recording(1)
	}
	return c
}

// finish records the end of member a, which ran as c, before its
// completion is passed on.
func (h *raceHooks) finish(a Assignment, c *race.Ctx) {
	if h == nil || c == nil {
		return
	}
	end := c.Finish()
	r := runOf(a.Task.Run())
	r.race.mu.Lock()
	rt := r.race.tasks[a.Task]
	rt.end = race.Join(rt.end, end)
	r.race.end = race.Join(r.race.end, end)
	r.race.mu.Unlock()
}

// replay ends member a, which ran as c in a chip's or SUB worker's
// process and recorded log there. The members of a task synchronise with
// each other (notify/wait, barriers), so their logs are replayed together
// once the last one ends, before its completion is passed on.
//
// A member stopped before it started (c nil) counts as ended, with
// nothing to replay.
func (h *raceHooks) replay(a Assignment, c *race.Ctx, log []byte) {
	if h == nil {
		return
	}
	l, err := race.DecodeLog(log)
	if err != nil {
		l = &race.RecordedLog{} // a failed member sends none; a bad log is checked as empty, and said
		if c != nil && len(log) > 0 {
			h.d.Note(fmt.Sprintf("the access log of member %d of task %d could not be read (%v): its accesses were not checked", a.Member, a.Task.ID(), err))
		}
	}
	r := runOf(a.Task.Run())
	members := len(taskOf(a.Task).args)
	r.race.mu.Lock()
	rt := r.race.tasks[a.Task]
	if rt.ctxs == nil {
		rt.ctxs = make([]*race.Ctx, members)
		rt.logs = make([]*race.RecordedLog, members)
	}
	rt.ctxs[a.Member], rt.logs[a.Member] = c, l
	rt.ended++
	last := rt.ended == len(rt.ctxs)
	ctxs, logs := rt.ctxs, rt.logs
	r.race.mu.Unlock()
	if !last {
		return
	}
	var live []*race.Ctx
	var theirs []*race.RecordedLog
	for m, c := range ctxs {
		if c != nil { // a member stopped before it started has no context
			live, theirs = append(live, c), append(theirs, logs[m])
		}
	}
	h.d.Replay(live, theirs)
	for m, c := range ctxs {
		if c != nil {
			h.finish(Assignment{Task: a.Task, Member: m}, c)
		}
	}
}

// prev is the end of every run of the Worker that is done: a run's tasks
// dispatch only once the runs before it are.
func (h *raceHooks) prev() race.Clock {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done
}

// runDone folds the end of run r, now done, into what later runs start
// after.
func (h *raceHooks) runDone(r *Run) {
	if h == nil || r.race == nil {
		return
	}
	end := r.RaceEnd()
	h.mu.Lock()
	h.done = race.Join(h.done, end)
	h.mu.Unlock()
}

// direct orders a direct-control call that may go ahead in run r (nil:
// outside any run) after every run of the Worker that is done: it waited
// for them.
func (h *raceHooks) direct(r *Run) {
	if h == nil {
		return
	}
	ctx := h.d.Main()
	if r != nil && r.race != nil {
		ctx = r.race.orch
	}
	ctx.Acquire(h.prev())
}

// queue counts assignments handed to endpoints.
func (h *raceHooks) queue(n int) {
	if h != nil && n != 0 {
		h.d.Queue(n)
	}
}

// RaceWait marks ctx (the orchestration, or a level-4 task) waiting for
// run r until the returned func is called, which also orders ctx after
// every task of r that finished.
func (r *Run) RaceWait(ctx *race.Ctx) (done func()) {
	if r.race == nil || ctx == nil {
		return func() {}
	}
	ctx.Park(fmt.Sprintf("run %d", r.id))
	return func() {
		ctx.Unblock()
		ctx.Acquire(r.RaceEnd())
	}
}

// nameDomain names each rank's window of d, buffer by buffer, in
// reports; forgetDomain drops what the detector knows of them. A window
// is named by its key (DomainRank.RaceKey), which the chip's process
// gives in process mode.
func (h *raceHooks) nameDomain(d *Domain) {
	if h == nil {
		return
	}
	det := h.d
	for rank, cr := range d.ranks {
		key := cr.RaceKey
		if key == 0 {
			continue
		}
		name := func(off, n int, what string) {
			if n > 0 {
				det.NameKey(key+uintptr(off), n, what, true)
			}
		}
		win := fmt.Sprintf("window of domain %q, rank %d", d.spec.Name, rank)
		at := 0
		for i, b := range d.spec.Buffers {
			off, n := d.offsets[i], b.Count*b.DType.Size()
			name(at, off-at, win)
			name(off, n, fmt.Sprintf("buffer %q of domain %q, rank %d", b.Name, d.spec.Name, rank))
			at = off + n
		}
		name(at, cr.WindowSize-at, win)
	}
}

func (h *raceHooks) forgetDomain(d *Domain) {
	if h == nil {
		return
	}
	for _, cr := range d.ranks {
		if cr.RaceKey != 0 {
			h.d.ForgetKey(cr.RaceKey, cr.WindowSize)
		}
	}
}

// nameDevice names device memory malloc'd on worker, in either mode:
// device memory is keyed by its chip and address (deviceKey);
// forgetDevice drops it at free.
func (h *raceHooks) nameDevice(worker int, addr uint64, size int) {
	if key := h.deviceKey(worker, addr); key != 0 {
		h.d.NameKey(key, size, fmt.Sprintf("device memory at %#x of %s", addr, h.w.workerName(NextLevel, worker)), true)
	}
}

func (h *raceHooks) forgetDevice(worker int, addr uint64) {
	if key := h.deviceKey(worker, addr); key != 0 {
		h.d.ForgetKey(key, h.d.RegionSize(key))
	}
}

// RaceDeviceKey is the race detector's key of device address addr of
// chip worker, 0 without --race or off a chip: how a binding names the
// device side of its copies.
func (w *Worker) RaceDeviceKey(worker int, addr uint64) uintptr {
	return w.race.deviceKey(worker, addr)
}

func (h *raceHooks) deviceKey(worker int, addr uint64) uintptr {
	tag := h.chipTag(worker)
	if tag == 0 {
		return 0
	}
	return tag | uintptr(addr)&(1<<48-1)
}

// chipTag is the race detector's tag of chip worker's memory: the chip of
// this process, or the process that runs it.
func (h *raceHooks) chipTag(worker int) uintptr {
	if h == nil || worker < 0 {
		return 0
	}
	return h.w.tree.raceTag(worker)
}

// nameHeap names a fresh run-heap block as unwritten.
func (h *raceHooks) nameHeap(b *heapBlock, op string) {
	if h == nil {
		return
	}
	mem := b.ring.seg.Mem[b.off : b.off+b.size]
	h.d.Name(race.Addr(mem), len(mem), fmt.Sprintf("run-heap block at %#x (%s)", b.addr, op), false)
}
