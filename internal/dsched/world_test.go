package dsched

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"simpler/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// world runs a program of Procs on real goroutines under one Sched and
// keeps what a replay must reproduce: the decisions and a log the Procs
// write (only the token holder appends, so it needs no lock).
type world struct {
	t      *testing.T
	s      *Sched
	wg     sync.WaitGroup
	trace  []Decision
	log    []string
	waits  [][]Wait // deadlock reports, in order
	failed []string // errors from the Procs' goroutines, under mu
	mu     sync.Mutex
}

func newWorld(t *testing.T, strat Strategy) *world {
	w := &world{t: t}
	w.s = New(strat, Options{
		Trace:      func(d Decision) { w.trace = append(w.trace, d) },
		OnDeadlock: func(ws []Wait) { w.waits = append(w.waits, ws) },
	})
	return w
}

// note appends to the log; only the running Proc calls it.
func (w *world) note(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

func (w *world) fail(format string, args ...any) {
	w.mu.Lock()
	w.failed = append(w.failed, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

// spawn creates a Proc under parent and starts its goroutine, which runs
// body once the Proc is picked and exits it after (even on a panic).
func (w *world) spawn(parent *Proc, name string, body func(p *Proc)) *Proc {
	q, err := parent.Go(name)
	if err != nil {
		w.fail("Go(%q): %v", name, err)
		return nil
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := q.Start(); err != nil {
			w.fail("%s: Start: %v", name, err)
			return
		}
		defer q.Exit()
		body(q)
	}()
	return q
}

// run makes the test goroutine the main Proc, runs main on it, and waits
// (bounded) until every Proc has exited.
func (w *world) run(main func(m *Proc)) {
	w.t.Helper()
	m, err := w.s.Main("main")
	if err != nil {
		w.t.Fatal(err)
	}
	main(m)
	if err := m.Exit(); err != nil {
		w.t.Fatal(err)
	}
	w.wait()
}

// wait waits up to 10 s for every Proc's goroutine to return; past that
// the Sched is wedged: Close frees the goroutines and the test fails.
func (w *world) wait() {
	w.t.Helper()
	finished := make(chan struct{})
	go func() { w.wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		w.s.Close()
		<-finished
		w.t.Fatal("the schedule did not finish in 10s")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.failed {
		w.t.Error(f)
	}
}

// outcome is what two runs of a seed must agree on.
type outcome struct {
	trace []Decision
	log   []string
	hash  uint64
	steps int
	now   time.Duration
}

func (w *world) outcome() outcome {
	select {
	case <-w.s.Done():
	default:
		w.t.Fatal("every Proc returned but Done is open")
	}
	return outcome{trace: w.trace, log: w.log, hash: w.s.Hash(), steps: w.s.Steps(), now: w.s.Now()}
}

// mixed is a program with several Procs that yield, block on each other
// (with and without deadlines), sleep, and create Procs.
func mixed(w *world, m *Proc) {
	x, finished := 0, 0
	bDone := false
	w.spawn(m, "a", func(p *Proc) {
		for i := 0; i < 3; i++ {
			x++
			w.note("a: x=%d", x)
			p.Yield("a.step")
		}
		p.Block("b's flag", func() bool { return bDone }, 0)
		w.note("a: saw b's flag at %v", w.s.Now())
		finished++
	})
	w.spawn(m, "b", func(p *Proc) {
		w.spawn(p, "b.d", func(q *Proc) {
			timedOut, err := q.Block("x >= 3", func() bool { return x >= 3 }, w.s.Now()+5*time.Millisecond)
			w.note("d: timedOut=%v err=%v x=%d", timedOut, err, x)
			q.Sleep(time.Millisecond)
			w.note("d: slept to %v", w.s.Now())
			finished++
		})
		p.Yield("b.spawned")
		x += 10
		w.note("b: x=%d", x)
		p.Sleep(2 * time.Millisecond)
		bDone = true
		finished++
	})
	m.Yield("main.spawned")
	w.spawn(m, "c", func(p *Proc) {
		for i := 0; i < 5; i++ {
			w.note("c: %d", i)
			p.Yield("c.step")
		}
		finished++
	})
	if _, err := m.Block("every worker", func() bool { return finished == 4 }, 0); err != nil {
		w.fail("main: %v", err)
	}
	w.note("main: done at %v", w.s.Now())
}

func runMixed(t *testing.T, strat Strategy) outcome {
	w := newWorld(t, strat)
	w.run(func(m *Proc) { mixed(w, m) })
	return w.outcome()
}
