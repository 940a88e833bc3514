package engine

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"simpler/internal/dsched"
)

// Deterministic scheduling (--seed, Config.Det): in thread mode every
// task member and the script's main thread run one at a time, and a seed
// decides who runs at every scheduling point (internal/dsched). What the
// engine owes the schedule is here:
//
//   - A member is a Proc of its own, made by whoever routes its
//     assignment (the running Proc: the schedule, not the OS, decides
//     when it exists); its endpoint's goroutine starts it and ends it.
//   - A goroutine of the engine waits only as a Proc's Block: a run's
//     wait, a drain, a full task window or heap, direct control waiting
//     for earlier runs. So nothing waits on the wall clock or on another
//     goroutine's timing.
//   - Deadlines are virtual: a task's is checked at every scheduling
//     point of the process (Det.Yield), so it fires at the same point of
//     every replay.
//
// Remote nodes and process mode are refused (Init): what they run is
// outside the schedule.

// Det is the deterministic schedule of one process.
type Det struct {
	S *dsched.Sched

	mu     sync.Mutex
	timers []detTimer // each Worker's next task deadline, by when
	procs  map[memberKey]*dsched.Proc
}

type detTimer struct {
	when time.Duration
	key  *deadlineTimer
	fire func()
}

// NewDet wraps a schedule for the Workers of one process.
func NewDet(s *dsched.Sched) *Det {
	return &Det{S: s, procs: map[memberKey]*dsched.Proc{}}
}

// detEpoch is the clock's reading at virtual time 0.
var detEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is the schedule's virtual time as a date: what time.now() says
// under --seed, and when the engine's events (a trace's) happen.
func (d *Det) Clock() time.Time { return detEpoch.Add(d.S.Now()) }

// Yield is a scheduling point of the running Proc (a builtin's access,
// every few Starlark steps); after it, the deadlines virtual time has
// reached fire, in order.
func (d *Det) Yield(point string) error {
	p := d.S.Running()
	if p == nil {
		return nil
	}
	if err := p.Yield(point); err != nil {
		return err
	}
	d.fireDue()
	return nil
}

// Block is a wait of the running Proc until ready() holds, or until
// timeout of virtual time (<= 0: none); then the deadlines due fire.
func (d *Det) Block(what string, ready func() bool, timeout time.Duration) (timedOut bool, err error) {
	p := d.S.Running()
	var deadline time.Duration
	if timeout > 0 {
		deadline = d.S.Now() + timeout
	}
	timedOut, err = p.Block(what, ready, deadline)
	d.fireDue()
	return timedOut, err
}

// after arms fire for when virtual time passes d from now.
func (d *Det) after(key *deadlineTimer, dur time.Duration, fire func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := detTimer{when: d.S.Now() + dur, key: key, fire: fire}
	i := sort.Search(len(d.timers), func(i int) bool { return d.timers[i].when > t.when })
	d.timers = append(d.timers, detTimer{})
	copy(d.timers[i+1:], d.timers[i:])
	d.timers[i] = t
}

// cancel disarms key's deadline.
func (d *Det) cancel(key *deadlineTimer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, t := range d.timers {
		if t.key == key {
			d.timers = append(d.timers[:i], d.timers[i+1:]...)
			return
		}
	}
}

func (d *Det) fireDue() {
	for {
		d.mu.Lock()
		if len(d.timers) == 0 || d.timers[0].when > d.S.Now() {
			d.mu.Unlock()
			return
		}
		t := d.timers[0]
		d.timers = d.timers[1:]
		d.mu.Unlock()
		t.fire()
	}
}

// detHooks is a Worker's side of the schedule, nil without --seed; its
// methods do nothing on a nil receiver, so each hook on the task path is
// one nil check.
type detHooks struct {
	w *Worker
	d *Det
	// wakes counts the core steps that woke waiters (driver.wake): what a
	// Proc in wait waits for. Guarded by w.mu.
	wakes uint64
}

// newDetHooks is w's side of schedule d, nil when d is (no --seed).
func newDetHooks(w *Worker, d *Det) *detHooks {
	if d == nil {
		return nil
	}
	return &detHooks{w: w, d: d}
}

// supported refuses, under --seed, what runs outside the schedule:
// process mode and remote nodes keep the wall clock. Caller holds w.mu.
func (h *detHooks) supported() error {
	if h == nil {
		return nil
	}
	w := h.w
	if w.cfg.Mode == "process" {
		return Errorf(ValueError, "init: --seed schedules thread mode only: a process-mode worker's kernels run in processes the schedule cannot order (run with --mode thread)")
	}
	for id := range w.tree.specs {
		if w.tree.specs[id] != nil {
			return Errorf(ValueError, "init: --seed schedules one process: remote_worker %d runs on a daemon the schedule cannot order", id)
		}
	}
	if len(w.tree.groups) > 0 {
		return Errorf(ValueError, "init: --seed schedules one process: a worker group's ranks run in processes the schedule cannot order")
	}
	return nil
}

// spawn makes the Procs of assignments about to be routed, by the running
// Proc.
func (h *detHooks) spawn(out []Assignment) {
	if h == nil || len(out) == 0 {
		return
	}
	d := h.d
	p := d.S.Running()
	for _, a := range out {
		q, err := p.Go(fmt.Sprintf("%s task %d member %d run %d", h.w.workerName(a.Pool, a.Target), a.Task.ID(), a.Member, runOf(a.Task.Run()).id))
		if err != nil {
			panic(fmt.Sprintf("engine: --seed: routing from outside the schedule: %v", err))
		}
		d.mu.Lock()
		d.procs[memberKey{a.Task, a.Member}] = q
		d.mu.Unlock()
	}
}

// start parks the endpoint's goroutine until the schedule runs member a;
// the returned Proc is a's, to Exit once a's completion is passed on.
func (h *detHooks) start(a Assignment) *dsched.Proc {
	if h == nil {
		return nil
	}
	d := h.d
	k := memberKey{a.Task, a.Member}
	d.mu.Lock()
	p := d.procs[k]
	delete(d.procs, k)
	d.mu.Unlock()
	if p != nil && p.Start() != nil {
		return nil // the schedule was closed: the member runs unordered, as close stops it
	}
	return p
}

// wait is the driver's wait under the schedule: the running Proc blocks
// until a core step wakes the waiters (driver.wake). Caller holds w.mu,
// which is released while it waits.
func (h *detHooks) wait() {
	w, seen := h.w, h.wakes
	w.mu.Unlock()
	h.d.Block("waits for tasks to retire", func() bool { return h.wakes != seen }, 0)
	w.mu.Lock()
}
