package lifetime

import (
	"errors"
	"testing"

	"simpler/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// The lifetime stepped without goroutines: release, one caller frees, the
// others get its attempt, and End decides by the one rule.
func TestLifeSteps(t *testing.T) {
	var l Life
	if l.Released() || l.Freed() || l.State() != Live {
		t.Fatalf("a new lifetime is %v", l.State())
	}
	if !l.Release() || l.Release() {
		t.Fatal("Release must report the first call only")
	}
	if !l.Released() || l.Freed() {
		t.Fatalf("after Release: %v", l.State())
	}
	a, run := l.Begin()
	if !run || a == nil || l.State() != Freeing || a.Ended() {
		t.Fatalf("the first Begin: run %v, state %v", run, l.State())
	}
	// A caller that comes while it runs gets the same attempt, to wait on.
	b, run := l.Begin()
	if run || b != a || b.Ended() {
		t.Fatalf("a second Begin: run %v, same attempt %v", run, b == a)
	}
	if l.Release() {
		t.Error("Release during the free reported a change")
	}
	l.End(a, nil, true)
	if !a.Ended() || a.Wait() != nil || !l.Freed() || !l.Released() {
		t.Fatalf("after a free: state %v, err %v", l.State(), a.Wait())
	}
	// After the free, every caller gets its result replayed, at once.
	c, run := l.Begin()
	if run || c != a || !c.Ended() {
		t.Fatalf("a Begin after the free: run %v, same attempt %v", run, c == a)
	}
}

// A live domain is released by the free that sweeps it.
func TestLifeSweep(t *testing.T) {
	var l Life
	a, run := l.Begin()
	if !run || !l.Released() || l.State() != Freeing {
		t.Fatalf("sweep: run %v, state %v", run, l.State())
	}
	l.End(a, nil, false)
	if !l.Freed() {
		t.Fatalf("state %v", l.State())
	}
}

// The failed-free rule: a free that can be run again leaves the domain
// released with the error, and the next Begin runs a new attempt; one that
// cannot ends it failed, replays the error and poisons the Worker.
func TestLifeFailedFree(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		err    error
		retry  bool
		next   State
		poison bool
	}{
		{nil, true, Freed, false},
		{nil, false, Freed, false},
		{boom, true, Released, false},
		{boom, false, Failed, true},
	}
	for _, c := range cases {
		if next, poison := Outcome(c.err, c.retry); next != c.next || poison != c.poison {
			t.Errorf("Outcome(%v, retry %v) = %v, %v; want %v, %v", c.err, c.retry, next, poison, c.next, c.poison)
		}
	}

	var l Life
	l.Release()
	a, _ := l.Begin()
	l.End(a, boom, true) // retryable
	if l.State() != Released || !l.Released() || l.Freed() || !a.Ended() || a.Wait() != boom {
		t.Fatalf("a retryable failure: state %v, err %v", l.State(), a.Wait())
	}
	if l.Release() {
		t.Error("a failed free made the domain live again")
	}
	b, run := l.Begin()
	if !run || b == a || l.State() != Freeing {
		t.Fatalf("the retry: run %v, new attempt %v, state %v", run, b != a, l.State())
	}
	l.End(b, nil, true)
	if !l.Freed() || b.Wait() != nil || a.Wait() != boom {
		t.Fatalf("the retry freed: state %v, errs %v %v", l.State(), a.Wait(), b.Wait())
	}

	var m Life
	a, _ = m.Begin()
	m.End(a, boom, false) // final
	if m.State() != Failed || !m.Released() || m.Freed() {
		t.Fatalf("a final failure: state %v", m.State())
	}
	for i := 0; i < 2; i++ {
		if b, run := m.Begin(); run || b != a || !b.Ended() || b.Wait() != boom {
			t.Fatalf("Begin after a final failure: run %v, replayed %v", run, b.Wait())
		}
	}
}

// End refuses an attempt that is not the one running: a bug, not a state.
func TestLifeEndChecksItsAttempt(t *testing.T) {
	var l Life
	a, _ := l.Begin()
	l.End(a, nil, true)
	defer func() {
		if recover() == nil {
			t.Error("a second End did not panic")
		}
	}()
	l.End(a, nil, true)
}
