package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"simpler/engine"
	"simpler/starlib"
)

// runObservers is what `simpler run` attaches to every Worker a script
// makes: a trace recorder (--trace) and a progress line (when stderr is a
// terminal). With neither, no observer is attached and the engine
// reports no events at all.
type runObservers struct {
	trace    *tracer
	progress *progress
	workers  atomic.Int32 // Workers seen, numbering them for the progress line
}

// newRunObservers creates the trace file now, so that a path that cannot
// be written is reported before the script runs rather than after it.
func newRunObservers(tracePath string, stderr io.Writer) (*runObservers, error) {
	ro := &runObservers{}
	if tracePath != "" {
		t, err := newTracer(tracePath)
		if err != nil {
			return nil, err
		}
		ro.trace = t
	}
	if f, ok := stderr.(*os.File); ok && isTerminal(int(f.Fd())) {
		ro.progress = newProgress(stderr, time.Second, 200*time.Millisecond)
	}
	return ro, nil
}

// attach hooks the observers into a session: every Worker it creates,
// and its output (a progress line is cleared before a script prints).
func (ro *runObservers) attach(s *starlib.Session) {
	if ro.trace == nil && ro.progress == nil {
		return
	}
	if ro.progress != nil {
		s.Stdout = ro.progress.clearing(s.Stdout)
		s.Stderr = ro.progress.clearing(s.Stderr)
		ro.progress.start()
	}
	s.OnWorker = func(w *engine.Worker) {
		var pid int
		if ro.trace != nil {
			pid = ro.trace.addWorker(w)
		}
		id := int(ro.workers.Add(1))
		w.Events().Observe(func(e engine.Event) {
			if ro.trace != nil {
				ro.trace.record(pid, e)
			}
			if ro.progress != nil {
				ro.progress.record(id, e)
			}
		})
	}
}

// finish stops the progress line and writes the trace.
func (ro *runObservers) finish() error {
	if ro.progress != nil {
		ro.progress.stop()
	}
	if ro.trace != nil {
		return ro.trace.write()
	}
	return nil
}

// tracer records events into a Chrome trace (Trace Event Format), which
// ui.perfetto.dev and chrome://tracing open: one process per Worker, one
// lane (thread) per endpoint, a slice per task, flow arrows from each
// producer's end to its consumers' start, a lane of global-domain
// commands per node, and instant events for domains and run fences.
//
// The format requires the slices of one thread to nest. Tasks on one
// endpoint need not be disjoint (a remote node runs several at once), and
// a node's commands overlap its tasks, so commands get a lane of their
// own and a lane's slices that overlap go on further tracks of it
// ("NAME #2"): see layout.
type tracer struct {
	path  string
	f     *os.File // created by newTracer, written by write
	mu    sync.Mutex
	t0    time.Time
	clock func() time.Time // time.Now, or the schedule's virtual time
	procs []*traceProc
	marks []traceEvent // instants, in arrival order
}

type traceProc struct {
	pid   int
	name  string
	lanes map[string]*traceLane
	order []*traceLane // in first-use order
	tasks map[taskKey][]*traceSpan
	deps  map[taskKey][]int // consumer → its producers' task ids
}

type taskKey struct {
	run  uint64
	task int
}

// traceLane is an endpoint's tasks, or a node's global commands.
type traceLane struct {
	name  string
	spans []*traceSpan
	names []string // its tracks' names, set by layout
}

// traceSpan is one slice; times are nanoseconds since the trace began.
type traceSpan struct {
	name, cat  string
	member     int
	start, end int64
	done       bool
	tid        int // its track, set by layout
	args       map[string]any
}

// traceEvent is one entry of the "traceEvents" array.
type traceEvent struct {
	Name  string         `json:"name"`
	Cat   string         `json:"cat,omitempty"`
	Ph    string         `json:"ph"`
	Ts    float64        `json:"ts"`
	Dur   *float64       `json:"dur,omitempty"`
	Pid   int            `json:"pid"`
	Tid   int            `json:"tid"`
	ID    int            `json:"id,omitempty"`
	Bp    string         `json:"bp,omitempty"`
	Scope string         `json:"s,omitempty"`
	Args  map[string]any `json:"args,omitempty"`
}

// newTracer creates the trace file at path.
func newTracer(path string) (*tracer, error) {
	f, err := os.Create(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("ValueError: --trace %s: cannot create the file: %v", path, err)
	}
	return &tracer{path: path, f: f, t0: time.Now(), clock: time.Now}, nil
}

// useClock makes the observers read clock instead of the wall clock (the
// schedule's virtual time under --seed), from its reading now.
func (ro *runObservers) useClock(clock func() time.Time) {
	if ro.trace != nil {
		ro.trace.clock, ro.trace.t0 = clock, clock()
	}
}

// addWorker gives w a process id in the trace and names it.
func (t *tracer) addWorker(w *engine.Worker) int {
	cfg := w.Config()
	t.mu.Lock()
	defer t.mu.Unlock()
	name := fmt.Sprintf("Worker %d: level %d", len(t.procs)+1, cfg.Level)
	if cfg.Platform != nil {
		name += ", " + cfg.Platform.Name()
	}
	if len(cfg.DeviceIDs) > 0 {
		name += ", devices " + engine.FormatInts(cfg.DeviceIDs)
	}
	p := &traceProc{pid: len(t.procs) + 1, name: name, lanes: map[string]*traceLane{},
		tasks: map[taskKey][]*traceSpan{}, deps: map[taskKey][]int{}}
	t.procs = append(t.procs, p)
	return p.pid
}

// ns is nanoseconds since the trace began. Slices are laid out in whole
// nanoseconds, so that the nesting they are given is exact.
func (t *tracer) ns(at time.Time) int64 { return at.Sub(t.t0).Nanoseconds() }

// us is the trace format's unit, microseconds, from nanoseconds.
func us(ns int64) float64 { return float64(ns) / 1e3 }

func (p *traceProc) lane(name string) *traceLane {
	l := p.lanes[name]
	if l == nil {
		l = &traceLane{name: name}
		p.lanes[name] = l
		p.order = append(p.order, l)
	}
	return l
}

// commandLane is the name of node's lane of global-domain commands.
func commandLane(node string) string { return node + ": global commands" }

func (t *tracer) record(pid int, e engine.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.procs[pid-1]
	key := taskKey{e.Run, e.Task}
	switch e.Kind {
	case engine.TaskSubmitted:
		if len(e.Deps) > 0 {
			p.deps[key] = append([]int(nil), e.Deps...)
		}
	case engine.TaskStarted:
		args := map[string]any{"run": e.Run, "task": e.Task, "member": e.Member}
		if deps := p.deps[key]; len(deps) > 0 {
			args["deps"] = deps
		}
		s := &traceSpan{name: e.Callable, cat: "task", member: e.Member, start: t.ns(e.At), args: args}
		l := p.lane(e.Worker)
		l.spans = append(l.spans, s)
		p.tasks[key] = append(p.tasks[key], s)
	case engine.TaskFinished:
		for _, s := range p.tasks[key] {
			if s.member == e.Member && !s.done {
				s.end, s.done = t.ns(e.At), true
				if e.Err != nil {
					s.args["error"] = e.Err.Error()
				}
				break
			}
		}
	case engine.GlobalStep: // a span on the node's command lane, as the broker timed it
		args := map[string]any{"domain": e.Domain, "domain_id": e.AllocID}
		if e.Err != nil {
			args["error"] = e.Err.Error()
		}
		end := t.ns(e.At)
		p.lane(e.Worker) // the node's tasks' lane, if it has none yet: the commands' lane shows after it
		l := p.lane(commandLane(e.Worker))
		l.spans = append(l.spans, &traceSpan{name: "global " + e.Callable, cat: "global",
			start: end - e.Dur.Nanoseconds(), end: end, done: true, args: args})
	case engine.RemoteSpan: // a remote node's work, on the node's own process
		end := t.ns(e.At) - e.Ago.Nanoseconds()
		l := t.nodeProc(pid, e.Node).lane(e.Lane)
		l.spans = append(l.spans, &traceSpan{name: e.Callable, cat: "remote task", start: end - e.Dur.Nanoseconds(), end: end, done: true,
			args: map[string]any{"node": e.Node}})
	case engine.RemoteCopy: // a copy to or from a node's buffer, on the node's copies lane
		end := t.ns(e.At)
		l := p.lane(copyLane(e.Worker))
		l.spans = append(l.spans, &traceSpan{name: e.Callable, cat: "copy", start: end - e.Dur.Nanoseconds(), end: end, done: true,
			args: map[string]any{"bytes": e.Bytes, "node": e.Worker}})
	case engine.DomainAllocated, engine.DomainReleased, engine.DomainFreed, engine.RunFenced:
		t.marks = append(t.marks, t.mark(pid, e))
	}
}

// copyLane is the name of the lane of a node's copies.
func copyLane(node string) string { return node + ": copies" }

// nodeProc is the process of the trace that shows what a remote node of
// the Worker of process pid did (its chip tasks), made on first use.
// Caller holds t.mu.
func (t *tracer) nodeProc(pid int, node string) *traceProc {
	name := fmt.Sprintf("%s of Worker %d (remote node)", node, pid)
	for _, p := range t.procs {
		if p.name == name {
			return p
		}
	}
	p := &traceProc{pid: len(t.procs) + 1, name: name, lanes: map[string]*traceLane{},
		tasks: map[taskKey][]*traceSpan{}, deps: map[taskKey][]int{}}
	t.procs = append(t.procs, p)
	return p
}

// mark is the instant event of a domain's or a run's event.
func (t *tracer) mark(pid int, e engine.Event) traceEvent {
	var name, cat string
	args := map[string]any{"run": e.Run}
	if e.Kind == engine.RunFenced {
		name, cat = fmt.Sprintf("run %d fenced", e.Run), "run"
	} else {
		verb := map[engine.EventKind]string{engine.DomainAllocated: "allocated", engine.DomainReleased: "released", engine.DomainFreed: "freed"}[e.Kind]
		name, cat = fmt.Sprintf("domain %s %s", e.Domain, verb), "domain"
		args["domain"], args["allocation_id"] = e.Domain, e.AllocID
	}
	if e.Err != nil {
		args["error"] = e.Err.Error()
	}
	return traceEvent{Name: name, Cat: cat, Ph: "i", Scope: "p", Ts: us(t.ns(e.At)), Pid: pid, Args: args}
}

// layout gives every span a track (a thread id), lane by lane: each span,
// in order of start, goes on the lane's first track whose last span has
// ended, a new track if none has. Slices on one track are then disjoint,
// so they trivially nest. Tid 0 is the worker's "events" lane; a lane
// without spans gets no track; a span still running at now ends there.
func (p *traceProc) layout(now int64) {
	tid := 0
	for _, l := range p.order {
		sort.SliceStable(l.spans, func(i, j int) bool { return l.spans[i].start < l.spans[j].start })
		var ends []int64 // per track, where its last span ends
		l.names = nil
		for _, s := range l.spans {
			if !s.done {
				s.end = max(now, s.start)
			}
			k := 0
			for k < len(ends) && ends[k] > s.start {
				k++
			}
			if k == len(ends) {
				ends = append(ends, 0)
				name := l.name
				if k > 0 {
					name = fmt.Sprintf("%s #%d", l.name, k+1)
				}
				l.names = append(l.names, name)
			}
			ends[k] = s.end
			s.tid = tid + 1 + k
		}
		tid += len(ends)
	}
}

// events builds the whole trace.
func (t *tracer) events() []traceEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.ns(t.clock())
	var out []traceEvent
	flow := 0
	for _, p := range t.procs {
		p.layout(now)
		out = append(out,
			traceEvent{Name: "process_name", Ph: "M", Pid: p.pid, Args: map[string]any{"name": p.name}},
			traceEvent{Name: "process_sort_index", Ph: "M", Pid: p.pid, Args: map[string]any{"sort_index": p.pid}},
			traceEvent{Name: "thread_name", Ph: "M", Pid: p.pid, Tid: 0, Args: map[string]any{"name": "events"}})
		tid := 0
		for _, l := range p.order {
			for _, name := range l.names {
				tid++
				out = append(out,
					traceEvent{Name: "thread_name", Ph: "M", Pid: p.pid, Tid: tid, Args: map[string]any{"name": name}},
					traceEvent{Name: "thread_sort_index", Ph: "M", Pid: p.pid, Tid: tid, Args: map[string]any{"sort_index": tid}})
			}
			for _, s := range l.spans {
				dur := us(s.end - s.start)
				out = append(out, traceEvent{Name: s.name, Cat: s.cat, Ph: "X", Ts: us(s.start), Dur: &dur, Pid: p.pid, Tid: s.tid, Args: s.args})
			}
		}
		out = p.flows(out, &flow)
	}
	return append(out, t.marks...)
}

// flows adds an arrow from each dependency's producer (its member that
// finished last) to each member of the consumer, numbering them from
// *n. Each end sits just inside its slice, so that viewers bind it to
// that slice.
func (p *traceProc) flows(out []traceEvent, n *int) []traceEvent {
	keys := make([]taskKey, 0, len(p.deps))
	for k := range p.deps {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].run != keys[j].run {
			return keys[i].run < keys[j].run
		}
		return keys[i].task < keys[j].task
	})
	for _, k := range keys {
		for _, dep := range p.deps[k] {
			prod := lastEnd(p.tasks[taskKey{k.run, dep}])
			if prod == nil {
				continue
			}
			for _, cons := range p.tasks[k] {
				*n++
				name := fmt.Sprintf("task %d → task %d", dep, k.task)
				out = append(out,
					traceEvent{Name: name, Cat: "dependency", Ph: "s", ID: *n, Ts: us(inside(prod.start, prod.end, false)), Pid: p.pid, Tid: prod.tid},
					traceEvent{Name: name, Cat: "dependency", Ph: "f", Bp: "e", ID: *n, Ts: us(inside(cons.start, cons.end, true)), Pid: p.pid, Tid: cons.tid})
			}
		}
	}
	return out
}

// lastEnd is the finished span that ended last.
func lastEnd(spans []*traceSpan) *traceSpan {
	var last *traceSpan
	for _, s := range spans {
		if s.done && (last == nil || s.end > last.end) {
			last = s
		}
	}
	return last
}

// inside returns a time in [start, end], a nanosecond in from the start
// when atStart, else from the end.
func inside(start, end int64, atStart bool) int64 {
	switch {
	case end-start < 2:
		return start
	case atStart:
		return start + 1
	default:
		return end - 1
	}
}

// write saves the trace as JSON into the file newTracer created.
func (t *tracer) write() error {
	bw := bufio.NewWriter(t.f)
	enc := json.NewEncoder(bw)
	doc := struct {
		TraceEvents     []traceEvent `json:"traceEvents"`
		DisplayTimeUnit string       `json:"displayTimeUnit"`
	}{t.events(), "ns"}
	err := enc.Encode(doc)
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--trace: writing %s: %v", t.path, err)
	}
	return nil
}

// progress is a one-line status on a terminal for long runs: it appears
// after a delay, is redrawn periodically, and is cleared before anything
// else is printed and at the end. It counts tasks of every Worker: done
// out of submitted, the members running, and the tasks that failed.
type progress struct {
	w            io.Writer
	delay, every time.Duration

	mu                               sync.Mutex
	t0                               time.Time
	submitted, done, failed, running int
	open                             map[progressRun]map[int]*progressTask // tasks not done yet, by run
	shown                            bool
	quit                             chan struct{}
	exited                           chan struct{}
	active                           bool // a task has started: there is something to show
}

// progressRun is one run of one Worker (numbered by runObservers).
type progressRun struct {
	worker int
	run    uint64
}

// progressTask is a task whose members have not all finished.
type progressTask struct {
	left    int   // members still to finish
	running []int // members started and not finished
	failed  bool
}

func newProgress(w io.Writer, delay, every time.Duration) *progress {
	return &progress{w: w, delay: delay, every: every, open: map[progressRun]map[int]*progressTask{},
		quit: make(chan struct{}), exited: make(chan struct{})}
}

// record counts one event of Worker worker's. A task is done when its
// last member finishes, or at its run's fence: a task that never ran
// (a producer failed, or the run was cancelled) retires there, and
// counts as failed.
func (p *progress) record(worker int, e engine.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rk := progressRun{worker, e.Run}
	switch e.Kind {
	case engine.TaskSubmitted:
		p.submitted++
		if p.open[rk] == nil {
			p.open[rk] = map[int]*progressTask{}
		}
		p.open[rk][e.Task] = &progressTask{left: max(e.Members, 1)}
	case engine.TaskStarted:
		if t := p.open[rk][e.Task]; t != nil {
			t.running = append(t.running, e.Member)
			p.running++
		}
		p.active = true
	case engine.TaskFinished:
		t := p.open[rk][e.Task]
		if t == nil {
			return
		}
		// A member cancelled before it started finishes without starting.
		if i := slices.Index(t.running, e.Member); i >= 0 {
			t.running = slices.Delete(t.running, i, i+1)
			p.running--
		}
		t.left--
		t.failed = t.failed || e.Err != nil
		if t.left == 0 {
			p.retire(rk, e.Task, t.failed)
		}
	case engine.RunFenced:
		for id := range p.open[rk] {
			p.retire(rk, id, true)
		}
		delete(p.open, rk)
	}
}

// retire counts task id of run rk as done. Caller holds p.mu.
func (p *progress) retire(rk progressRun, id int, failed bool) {
	p.running -= len(p.open[rk][id].running)
	delete(p.open[rk], id)
	if len(p.open[rk]) == 0 {
		delete(p.open, rk)
	}
	p.done++
	if failed {
		p.failed++
	}
}

// line is the status text.
func (p *progress) line() string {
	s := fmt.Sprintf("simpler: %d/%d tasks done, %d running", p.done, p.submitted, p.running)
	if p.failed > 0 {
		s += fmt.Sprintf(", %d failed", p.failed)
	}
	return s + fmt.Sprintf(" [%.1fs]", time.Since(p.t0).Seconds())
}

func (p *progress) start() {
	p.t0 = time.Now()
	go func() {
		defer close(p.exited)
		first := time.NewTimer(p.delay)
		defer first.Stop()
		select {
		case <-p.quit:
			return
		case <-first.C:
		}
		tick := time.NewTicker(p.every)
		defer tick.Stop()
		for {
			p.mu.Lock()
			if p.active {
				fmt.Fprintf(p.w, "\r\x1b[K%s", p.line())
				p.shown = true
			}
			p.mu.Unlock()
			select {
			case <-p.quit:
				return
			case <-tick.C:
			}
		}
	}()
}

// clearLocked erases the status line if it is showing.
func (p *progress) clearLocked() {
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}

func (p *progress) stop() {
	close(p.quit)
	<-p.exited
	p.mu.Lock()
	p.clearLocked()
	p.mu.Unlock()
}

// clearing wraps w so that the status line is erased before each write.
func (p *progress) clearing(w io.Writer) io.Writer { return clearingWriter{p, w} }

type clearingWriter struct {
	p *progress
	w io.Writer
}

func (c clearingWriter) Write(b []byte) (int, error) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	c.p.clearLocked()
	return c.w.Write(b)
}
