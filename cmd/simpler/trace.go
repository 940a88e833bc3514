package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"sync"
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
}

func newRunObservers(tracePath string, stderr io.Writer) *runObservers {
	ro := &runObservers{}
	if tracePath != "" {
		ro.trace = newTracer(tracePath)
	}
	if f, ok := stderr.(*os.File); ok && isTerminal(int(f.Fd())) {
		ro.progress = newProgress(stderr, time.Second, 200*time.Millisecond)
	}
	return ro
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
		w.Observe(func(e engine.Event) {
			if ro.trace != nil {
				ro.trace.record(pid, e)
			}
			if ro.progress != nil {
				ro.progress.record(e)
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
// producer's end to its consumers' start, and instant events for domains
// and run fences.
type tracer struct {
	path  string
	mu    sync.Mutex
	t0    time.Time
	procs []*traceProc
	marks []traceEvent // instants, in arrival order
}

type traceProc struct {
	pid   int
	name  string
	lanes map[string]int // endpoint name → tid
	order []string       // lanes in first-use order
	tasks map[taskKey][]*taskSpan
	deps  map[taskKey][]int // consumer → its producers' task ids
}

type taskKey struct {
	run  uint64
	task int
}

type taskSpan struct {
	member     int
	tid        int
	callable   string
	start, end time.Time
	done       bool
	err        error
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

func newTracer(path string) *tracer { return &tracer{path: path, t0: time.Now()} }

// addWorker gives w a process id in the trace and names it.
func (t *tracer) addWorker(w *engine.Worker) int {
	cfg := w.Config()
	name := fmt.Sprintf("Worker %d: level %d", len(t.procs)+1, cfg.Level)
	if cfg.Platform != nil {
		name += ", " + cfg.Platform.Name()
	}
	if len(cfg.DeviceIDs) > 0 {
		name += fmt.Sprintf(", devices %v", cfg.DeviceIDs)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := &traceProc{pid: len(t.procs) + 1, name: name, lanes: map[string]int{},
		tasks: map[taskKey][]*taskSpan{}, deps: map[taskKey][]int{}}
	t.procs = append(t.procs, p)
	return p.pid
}

// us is microseconds since the trace began (nanosecond resolution).
func (t *tracer) us(at time.Time) float64 { return float64(at.Sub(t.t0).Nanoseconds()) / 1e3 }

// round3 keeps three decimals: nanoseconds, in microseconds.
func round3(x float64) float64 { return math.Round(x*1e3) / 1e3 }

func (p *traceProc) lane(name string) int {
	if tid, ok := p.lanes[name]; ok {
		return tid
	}
	tid := len(p.lanes) + 1 // tid 0 carries the worker's instant events
	p.lanes[name] = tid
	p.order = append(p.order, name)
	return tid
}

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
		p.tasks[key] = append(p.tasks[key], &taskSpan{member: e.Member, tid: p.lane(e.Worker), callable: e.Callable, start: e.At})
	case engine.TaskFinished:
		for _, s := range p.tasks[key] {
			if s.member == e.Member && !s.done {
				s.end, s.done, s.err = e.At, true, e.Err
				break
			}
		}
	case engine.DomainAllocated, engine.DomainReleased, engine.DomainFreed:
		verb := map[engine.EventKind]string{engine.DomainAllocated: "allocated", engine.DomainReleased: "released", engine.DomainFreed: "freed"}[e.Kind]
		args := map[string]any{"domain": e.Domain, "allocation_id": e.AllocID, "run": e.Run}
		if e.Err != nil {
			args["error"] = e.Err.Error()
		}
		t.marks = append(t.marks, traceEvent{Name: fmt.Sprintf("domain %s %s", e.Domain, verb), Cat: "domain",
			Ph: "i", Scope: "p", Ts: round3(t.us(e.At)), Pid: pid, Args: args})
	case engine.GlobalStep: // a span on the node's lane, as the broker timed it
		dur := round3(float64(e.Dur) / 1e3)
		args := map[string]any{"domain": e.Domain, "domain_id": e.AllocID}
		if e.Err != nil {
			args["error"] = e.Err.Error()
		}
		t.marks = append(t.marks, traceEvent{Name: "global " + e.Callable, Cat: "global", Ph: "X", Ts: round3(t.us(e.At.Add(-e.Dur))), Dur: &dur,
			Pid: pid, Tid: p.lane(e.Worker), Args: args})
	case engine.RunFenced:
		args := map[string]any{"run": e.Run}
		if e.Err != nil {
			args["error"] = e.Err.Error()
		}
		t.marks = append(t.marks, traceEvent{Name: fmt.Sprintf("run %d fenced", e.Run), Cat: "run",
			Ph: "i", Scope: "p", Ts: round3(t.us(e.At)), Pid: pid, Args: args})
	}
}

// events builds the whole trace.
func (t *tracer) events() []traceEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	var out []traceEvent
	flow := 0
	for _, p := range t.procs {
		out = append(out,
			traceEvent{Name: "process_name", Ph: "M", Pid: p.pid, Args: map[string]any{"name": p.name}},
			traceEvent{Name: "process_sort_index", Ph: "M", Pid: p.pid, Args: map[string]any{"sort_index": p.pid}},
			traceEvent{Name: "thread_name", Ph: "M", Pid: p.pid, Tid: 0, Args: map[string]any{"name": "events"}})
		for _, name := range p.order {
			tid := p.lanes[name]
			out = append(out,
				traceEvent{Name: "thread_name", Ph: "M", Pid: p.pid, Tid: tid, Args: map[string]any{"name": name}},
				traceEvent{Name: "thread_sort_index", Ph: "M", Pid: p.pid, Tid: tid, Args: map[string]any{"sort_index": tid}})
		}
		keys := make([]taskKey, 0, len(p.tasks))
		for k := range p.tasks {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			if keys[i].run != keys[j].run {
				return keys[i].run < keys[j].run
			}
			return keys[i].task < keys[j].task
		})
		for _, k := range keys {
			for _, s := range p.tasks[k] {
				end := s.end
				if !s.done {
					end = now
				}
				dur := round3(t.us(end) - t.us(s.start))
				args := map[string]any{"run": k.run, "task": k.task, "member": s.member}
				if s.err != nil {
					args["error"] = s.err.Error()
				}
				if deps := p.deps[k]; len(deps) > 0 {
					args["deps"] = deps
				}
				out = append(out, traceEvent{Name: s.callable, Cat: "task", Ph: "X", Ts: round3(t.us(s.start)), Dur: &dur, Pid: p.pid, Tid: s.tid, Args: args})
			}
		}
		// Flows: from the producer's last member to finish, to each
		// member of the consumer. Each end sits just inside its slice so
		// that viewers bind it to that slice.
		for _, k := range keys {
			for _, dep := range p.deps[k] {
				prod := lastEnd(p.tasks[taskKey{k.run, dep}])
				if prod == nil {
					continue
				}
				for _, cons := range p.tasks[k] {
					flow++
					from := round3(inside(t.us(prod.start), t.us(prod.end), false))
					to := round3(inside(t.us(cons.start), t.us(cons.end), true))
					name := fmt.Sprintf("task %d → task %d", dep, k.task)
					out = append(out,
						traceEvent{Name: name, Cat: "dependency", Ph: "s", ID: flow, Ts: from, Pid: p.pid, Tid: prod.tid},
						traceEvent{Name: name, Cat: "dependency", Ph: "f", Bp: "e", ID: flow, Ts: to, Pid: p.pid, Tid: cons.tid})
				}
			}
		}
	}
	return append(out, t.marks...)
}

// lastEnd is the finished span that ended last.
func lastEnd(spans []*taskSpan) *taskSpan {
	var last *taskSpan
	for _, s := range spans {
		if s.done && (last == nil || s.end.After(last.end)) {
			last = s
		}
	}
	return last
}

// inside returns a time just inside [start, end]: near the start when
// atStart, else near the end.
func inside(start, end float64, atStart bool) float64 {
	const eps = 0.001 // one nanosecond, in microseconds
	if end-start <= 2*eps {
		return (start + end) / 2
	}
	if atStart {
		return start + eps
	}
	return end - eps
}

// write saves the trace as JSON.
func (t *tracer) write() error {
	f, err := os.Create(t.path)
	if err != nil {
		return fmt.Errorf("--trace: %v", err)
	}
	bw := bufio.NewWriter(f)
	enc := json.NewEncoder(bw)
	doc := struct {
		TraceEvents     []traceEvent `json:"traceEvents"`
		DisplayTimeUnit string       `json:"displayTimeUnit"`
	}{t.events(), "ns"}
	err = enc.Encode(doc)
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--trace: writing %s: %v", t.path, err)
	}
	return nil
}

// progress is a one-line status on a terminal for long runs: it appears
// after a delay, is redrawn periodically, and is cleared before anything
// else is printed and at the end.
type progress struct {
	w            io.Writer
	delay, every time.Duration

	mu                    sync.Mutex
	t0                    time.Time
	running, done, failed int
	shown                 bool
	quit                  chan struct{}
	exited                chan struct{}
	active                bool // a task has started: there is something to show
}

func newProgress(w io.Writer, delay, every time.Duration) *progress {
	return &progress{w: w, delay: delay, every: every, quit: make(chan struct{}), exited: make(chan struct{})}
}

func (p *progress) record(e engine.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e.Kind {
	case engine.TaskStarted:
		p.running++
		p.active = true
	case engine.TaskFinished:
		p.running--
		p.done++
		if e.Err != nil {
			p.failed++
		}
	}
}

// line is the status text.
func (p *progress) line() string {
	s := fmt.Sprintf("simpler: %d tasks done, %d running", p.done, p.running)
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
