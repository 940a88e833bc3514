package dsched

import (
	"errors"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"simpler/kind"
)

func pct(t testing.TB, seed uint64, depth, steps int) *PCT {
	s, err := NewPCT(seed, depth, steps)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func strategies(t testing.TB, seed uint64) map[string]Strategy {
	return map[string]Strategy{"random": NewRandom(seed), "pct": pct(t, seed, 3, 60)}
}

func TestSameSeedReplaysExactly(t *testing.T) {
	for _, name := range []string{"random", "pct"} {
		for _, seed := range []uint64{0, 7, 1 << 40} {
			first := runMixed(t, strategies(t, seed)[name])
			if first.steps < 15 || len(first.trace) != first.steps {
				t.Fatalf("%s seed %d: %d steps, %d traced: the program did not run", name, seed, first.steps, len(first.trace))
			}
			runs := 100
			if seed != 7 {
				runs = 10
			}
			for i := 1; i < runs; i++ {
				again := runMixed(t, strategies(t, seed)[name])
				if !reflect.DeepEqual(again, first) {
					t.Fatalf("%s seed %d run %d differs:\nfirst %+v\nagain %+v", name, seed, i, first, again)
				}
			}
		}
	}
}

func TestSeedsGiveDifferentSchedules(t *testing.T) {
	for _, name := range []string{"random", "pct"} {
		hashes := map[uint64]bool{}
		logs := map[string]bool{}
		for seed := uint64(0); seed < 40; seed++ {
			o := runMixed(t, strategies(t, seed)[name])
			hashes[o.hash] = true
			logs[strings.Join(o.log, "\n")] = true
		}
		if len(hashes) <= 20 {
			t.Errorf("%s: 40 seeds gave %d distinct schedules, want most of them", name, len(hashes))
		}
		if len(logs) < 5 {
			t.Errorf("%s: 40 seeds gave %d distinct outcomes, want at least 5", name, len(logs))
		}
	}
}

func TestVirtualTimeoutsFireAtTheSameStepEveryReplay(t *testing.T) {
	type fired struct {
		step int
		at   time.Duration
	}
	run := func(seed uint64) (late, early fired, spinEnd int) {
		w := newWorld(t, NewRandom(seed))
		w.run(func(m *Proc) {
			wait := func(name string, d time.Duration, into *fired) {
				w.spawn(m, name, func(p *Proc) {
					timedOut, err := p.Block("nothing", func() bool { return false }, d)
					if !timedOut || err != nil {
						w.fail("%s: timedOut %v err %v", name, timedOut, err)
					}
					*into = fired{w.s.Steps(), w.s.Now()}
				})
			}
			wait("late", 30*time.Millisecond, &late)
			wait("early", 10*time.Millisecond, &early)
			w.spawn(m, "spin", func(p *Proc) {
				for i := 0; i < 50; i++ {
					p.Yield("spin")
				}
				spinEnd = w.s.Steps()
				if w.s.Now() != 0 {
					w.fail("virtual time moved to %v while a Proc could run", w.s.Now())
				}
			})
		})
		return late, early, spinEnd
	}
	for seed := uint64(0); seed < 5; seed++ {
		late, early, spinEnd := run(seed)
		if early.at != 10*time.Millisecond || late.at != 30*time.Millisecond {
			t.Fatalf("seed %d: early woke at %v, late at %v", seed, early.at, late.at)
		}
		if !(spinEnd < early.step && early.step < late.step) {
			t.Fatalf("seed %d: spin ended at step %d, early fired at %d, late at %d", seed, spinEnd, early.step, late.step)
		}
		for i := 0; i < 20; i++ {
			l, e, s := run(seed)
			if l != late || e != early || s != spinEnd {
				t.Fatalf("seed %d replay %d: fired %v %v (spin %d), first run %v %v (spin %d)", seed, i, e, l, s, early, late, spinEnd)
			}
		}
	}
}

func TestDeadlockReportedAtOnceWithEveryWait(t *testing.T) {
	w := newWorld(t, NewRandom(3))
	var errs [3]error
	var reportStep, lastBlock int
	w.s.onDeadlock = func(ws []Wait) {
		w.waits = append(w.waits, ws)
		reportStep = w.s.Steps()
	}
	w.run(func(m *Proc) {
		var aSet, bSet, mSet bool
		block := func(p *Proc, i int, what string, flag *bool) {
			lastBlock = w.s.Steps()
			_, errs[i] = p.Block(what, func() bool { return *flag }, 0)
		}
		w.spawn(m, "a", func(p *Proc) { block(p, 1, "b's flag", &bSet); aSet = true })
		w.spawn(m, "b", func(p *Proc) { block(p, 2, "main's flag", &mSet); bSet = true })
		block(m, 0, "a's flag", &aSet)
		mSet = true
	})
	if len(w.waits) != 1 {
		t.Fatalf("%d deadlock reports, want 1: %v", len(w.waits), w.waits)
	}
	want := []Wait{{0, "main", "a's flag", 0}, {1, "a", "b's flag", 0}, {2, "b", "main's flag", 0}}
	if !reflect.DeepEqual(w.waits[0], want) {
		t.Errorf("report %v, want %v", w.waits[0], want)
	}
	// Reported in the very decision of the last Block: no step ran in
	// between.
	if reportStep != lastBlock+1 {
		t.Errorf("reported after step %d, the last Block was step %d", reportStep, lastBlock+1)
	}
	for i, err := range errs {
		if !errors.Is(err, ErrDeadlock) || kind.Of(err) != kind.RuntimeError {
			t.Errorf("Block %d returned %v, want a RuntimeError wrapping ErrDeadlock", i, err)
			continue
		}
		for _, name := range []string{"main waits for a's flag", "a waits for b's flag", "b waits for main's flag"} {
			if !strings.Contains(err.Error(), name) {
				t.Errorf("Block %d: %q does not name %q", i, err, name)
			}
		}
	}
}

// ordering is a program with a planted depth-2 bug: b must not read x
// between a's two writes. It returns whether the bug showed.
func ordering(t *testing.T, strat Strategy) bool {
	w := newWorld(t, strat)
	bug := false
	w.run(func(m *Proc) {
		x := 0
		w.spawn(m, "a", func(p *Proc) {
			p.Yield("a.before")
			x = 1 // step 1: half of an update
			p.Yield("a.mid")
			x = 2 // step 2: the update is whole
			p.Yield("a.after")
		})
		for i := 0; i < 3; i++ {
			w.spawn(m, "noise", func(p *Proc) {
				for j := 0; j < 4; j++ {
					p.Yield("noise")
				}
			})
		}
		w.spawn(m, "b", func(p *Proc) {
			p.Yield("b.before")
			if x == 1 {
				bug = true
			}
		})
	})
	return bug
}

// failing returns the first seed in [0, limit) whose run shows the bug
// (-1 if none does) and how many of them do.
func failing(t *testing.T, limit uint64, strat func(seed uint64) Strategy) (first, count int) {
	first = -1
	for seed := uint64(0); seed < limit; seed++ {
		if ordering(t, strat(seed)) {
			if first < 0 {
				first = int(seed)
			}
			count++
		}
	}
	return first, count
}

const (
	wantPCTSeed     = 79
	wantPCTCount    = 8
	wantRandomSeed  = 0
	wantRandomCount = 40
)

func TestStrategiesFindAPlantedOrderingBug(t *testing.T) {
	// The seeds are a property of the PRNG and the strategies, the same
	// on every machine: a change to either shows here.
	cases := []struct {
		name  string
		strat func(seed uint64) Strategy
		first int
		count int // of the first 200 seeds
	}{
		{"pct", func(seed uint64) Strategy { return pct(t, seed, 2, 30) }, wantPCTSeed, wantPCTCount},
		{"random", func(seed uint64) Strategy { return NewRandom(seed) }, wantRandomSeed, wantRandomCount},
	}
	for _, c := range cases {
		got, count := failing(t, 200, c.strat)
		if got != c.first || count != c.count {
			t.Errorf("%s found the bug first at seed %d and in %d of 200 seeds, want %d and %d", c.name, got, count, c.first, c.count)
		}
		if got >= 0 && !ordering(t, c.strat(uint64(got))) {
			t.Errorf("%s seed %d did not replay the bug", c.name, got)
		}
	}
	// PCT of depth 1 never preempts: a Proc runs until it blocks or exits,
	// so a's two steps are never split and the bug never shows.
	if got, _ := failing(t, 50, func(seed uint64) Strategy { return pct(t, seed, 1, 30) }); got != -1 {
		t.Errorf("PCT of depth 1 split a's steps at seed %d", got)
	}
}

func TestCreatedProcNeverRunsBeforeItsCreatorYields(t *testing.T) {
	for seed := uint64(0); seed < 30; seed++ {
		w := newWorld(t, NewRandom(seed))
		w.run(func(m *Proc) {
			var ran atomic.Bool
			yielded := false
			w.spawn(m, "child", func(p *Proc) {
				ran.Store(true)
				if !yielded {
					w.fail("seed %d: the child ran before main yielded", seed)
				}
			})
			// Give the child's goroutine every chance to run on its own.
			for i := 0; i < 100 && !ran.Load(); i++ {
				runtime.Gosched()
			}
			if ran.Load() {
				w.fail("seed %d: the child ran while main held the token", seed)
			}
			yielded = true
			m.Yield("main.yield")
		})
	}
}

func TestRefusalsChangeNothing(t *testing.T) {
	w := newWorld(t, NewRandom(1))
	w.run(func(m *Proc) {
		if _, err := w.s.Main("again"); kind.Of(err) != kind.RuntimeError || err == nil {
			w.fail("a second Main: %v", err)
		}
		var child *Proc
		child = w.spawn(m, "child", func(p *Proc) {
			if err := p.Start(); err == nil || kind.Of(err) != kind.RuntimeError {
				w.fail("a second Start: %v", err)
			}
		})
		steps, hash, n := w.s.Steps(), w.s.Hash(), w.s.core.created
		// The child does not hold the token: every call of it is refused.
		for name, call := range map[string]func() error{
			"Yield": func() error { return child.Yield("x") },
			"Block": func() error { _, err := child.Block("x", nil, 0); return err },
			"Go":    func() error { _, err := child.Go("x"); return err },
			"Exit":  func() error { return child.Exit() },
		} {
			err := call()
			if err == nil || kind.Of(err) != kind.RuntimeError || !strings.Contains(err.Error(), "does not hold the token") {
				w.fail("%s by a parked Proc: %v", name, err)
			}
		}
		if w.s.Steps() != steps || w.s.Hash() != hash || w.s.core.created != n {
			w.fail("a refusal changed the schedule")
		}
	})
	if _, err := NewPCT(1, 0, 10); kind.Of(err) != kind.ValueError {
		t.Errorf("PCT depth 0: %v", err)
	}
	if _, err := NewPCT(1, 3, 0); kind.Of(err) != kind.ValueError {
		t.Errorf("PCT steps 0: %v", err)
	}
}

func TestCloseFreesEveryParkedGoroutine(t *testing.T) {
	w := newWorld(t, NewRandom(5))
	m, err := w.s.Main("main")
	if err != nil {
		t.Fatal(err)
	}
	var blockErr error
	w.spawn(m, "blocked", func(p *Proc) {
		_, blockErr = p.Block("forever", nil, 0)
	})
	// main yields until that Proc has blocked.
	for i := 0; i < 100 && w.s.core.live[1].state != blocked; i++ {
		if err := m.Yield("main"); err != nil {
			t.Fatal(err)
		}
	}
	if w.s.core.live[1].state != blocked {
		t.Fatal("the Proc never blocked")
	}
	// A Proc created and started, never picked: its Start is parked.
	late, err := m.Go("never picked")
	if err != nil {
		t.Fatal(err)
	}
	startErr := make(chan error)
	go func() { startErr <- late.Start() }()
	// Close from outside the schedule while main holds the token.
	closed := make(chan struct{})
	go func() { w.s.Close(); close(closed) }()
	<-closed
	if err := <-startErr; !errors.Is(err, ErrClosed) {
		t.Errorf("the parked Start returned %v, want ErrClosed", err)
	}
	if err := m.Yield("after"); !errors.Is(err, ErrClosed) {
		t.Errorf("Yield after Close: %v", err)
	}
	if _, err := m.Go("after"); !errors.Is(err, ErrClosed) {
		t.Errorf("Go after Close: %v", err)
	}
	if err := m.Exit(); err != nil {
		t.Errorf("Exit after Close: %v", err)
	}
	w.wait()
	if !errors.Is(blockErr, ErrClosed) {
		t.Errorf("the parked Block returned %v, want ErrClosed", blockErr)
	}
}

func TestPanickingProcDoesNotWedgeTheOthers(t *testing.T) {
	w := newWorld(t, NewRandom(9))
	var recovered any
	finished := 0
	w.run(func(m *Proc) {
		q, err := m.Go("panics")
		if err != nil {
			t.Fatal(err)
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer func() { recovered = recover() }()
			if q.Start() != nil {
				return
			}
			defer q.Exit() // runs first: the token goes on while it unwinds
			q.Yield("before")
			panic("boom")
		}()
		for i := 0; i < 3; i++ {
			w.spawn(m, "worker", func(p *Proc) {
				p.Yield("w")
				finished++
			})
		}
		m.Block("workers", func() bool { return finished == 3 }, 0)
	})
	if recovered != "boom" || finished != 3 {
		t.Errorf("recovered %v, %d workers finished", recovered, finished)
	}
}

func TestParseFlags(t *testing.T) {
	if seed, err := ParseSeed("18446744073709551615"); err != nil || seed != 1<<64-1 {
		t.Errorf("ParseSeed(max) = %d, %v", seed, err)
	}
	for _, bad := range []string{"-1", "abc", "1.5", "", "18446744073709551616", "+-3"} {
		_, err := ParseSeed(bad)
		if !errors.Is(err, ErrUsage) || kind.Of(err) != kind.ValueError || !strings.Contains(err.Error(), "--seed") {
			t.Errorf("ParseSeed(%q): %v", bad, err)
		}
	}
	if n, err := ParsePositive("--explore", "200"); err != nil || n != 200 {
		t.Errorf("ParsePositive(200) = %d, %v", n, err)
	}
	for _, c := range []struct{ flag, value string }{{"--explore", "0"}, {"--pct-depth", "0"}, {"--pct-depth", "-2"}, {"--explore", "x"}} {
		_, err := ParsePositive(c.flag, c.value)
		if !errors.Is(err, ErrUsage) || kind.Of(err) != kind.ValueError || !strings.Contains(err.Error(), c.flag+` "`+c.value+`"`) {
			t.Errorf("ParsePositive(%s, %q): %v", c.flag, c.value, err)
		}
	}
}

// alternate always hands the token to another runnable Proc.
type alternate struct{}

func (alternate) Created(int) {}
func (alternate) Pick(step, running int, runnable []int) int {
	for i, id := range runnable {
		if id != running {
			return i
		}
	}
	return 0
}

// BenchmarkYieldSwitch measures one hand-off of the token between two
// goroutines: each op is one Yield that parks one Proc and runs the other.
func BenchmarkYieldSwitch(b *testing.B) {
	s := New(alternate{}, Options{})
	m, _ := s.Main("main")
	stop := false
	other, _ := m.Go("other")
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		if other.Start() != nil {
			return
		}
		for !stop {
			other.Yield("other")
		}
		other.Exit()
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i += 2 {
		m.Yield("main")
	}
	b.StopTimer()
	stop = true
	m.Exit()
	<-finished
}
