package engine

import (
	"errors"
	"testing"
)

// closed reports whether an attempt has ended (its done is closed).
func closed(a *freeAttempt) bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// The lifetime stepped without goroutines: release, one caller frees, the
// others get its attempt, and end decides by the one rule.
func TestLifetimeSteps(t *testing.T) {
	var l lifetime
	if l.released() || l.freed() || l.state != lifeLive {
		t.Fatalf("a new lifetime is %v", l.state)
	}
	if !l.release() || l.release() {
		t.Fatal("release must report the first call only")
	}
	if !l.released() || l.freed() {
		t.Fatalf("after release: %v", l.state)
	}
	a, run := l.begin()
	if !run || a == nil || l.state != lifeFreeing || closed(a) {
		t.Fatalf("the first begin: run %v, state %v", run, l.state)
	}
	// A caller that comes while it runs gets the same attempt, to wait on.
	b, run := l.begin()
	if run || b != a || closed(b) {
		t.Fatalf("a second begin: run %v, same attempt %v", run, b == a)
	}
	if l.release() {
		t.Error("release during the free reported a change")
	}
	l.end(a, nil, true)
	if !closed(a) || a.err != nil || !l.freed() || !l.released() {
		t.Fatalf("after a free: state %v, err %v", l.state, a.err)
	}
	// After the free, every caller gets its result replayed, at once.
	c, run := l.begin()
	if run || c != a || !closed(c) {
		t.Fatalf("a begin after the free: run %v, same attempt %v", run, c == a)
	}
}

// A live domain is released by the free that sweeps it.
func TestLifetimeSweep(t *testing.T) {
	var l lifetime
	a, run := l.begin()
	if !run || !l.released() || l.state != lifeFreeing {
		t.Fatalf("sweep: run %v, state %v", run, l.state)
	}
	l.end(a, nil, false)
	if !l.freed() {
		t.Fatalf("state %v", l.state)
	}
}

// The failed-free rule: a free that can be run again leaves the domain
// released with the error, and the next begin runs a new attempt; one that
// cannot ends it failed, replays the error and poisons the Worker.
func TestLifetimeFailedFree(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		err    error
		retry  bool
		next   lifeState
		poison bool
	}{
		{nil, true, lifeFreed, false},
		{nil, false, lifeFreed, false},
		{boom, true, lifeReleased, false},
		{boom, false, lifeFailed, true},
	}
	for _, c := range cases {
		if next, poison := outcome(c.err, c.retry); next != c.next || poison != c.poison {
			t.Errorf("outcome(%v, retry %v) = %v, %v; want %v, %v", c.err, c.retry, next, poison, c.next, c.poison)
		}
	}

	var l lifetime
	l.release()
	a, _ := l.begin()
	l.end(a, boom, true) // retryable
	if l.state != lifeReleased || !l.released() || l.freed() || !closed(a) || a.err != boom {
		t.Fatalf("a retryable failure: state %v, err %v", l.state, a.err)
	}
	if l.release() {
		t.Error("a failed free made the domain live again")
	}
	b, run := l.begin()
	if !run || b == a || l.state != lifeFreeing {
		t.Fatalf("the retry: run %v, new attempt %v, state %v", run, b != a, l.state)
	}
	l.end(b, nil, true)
	if !l.freed() || b.err != nil || a.err != boom {
		t.Fatalf("the retry freed: state %v, errs %v %v", l.state, a.err, b.err)
	}

	var m lifetime
	a, _ = m.begin()
	m.end(a, boom, false) // final
	if m.state != lifeFailed || !m.released() || m.freed() {
		t.Fatalf("a final failure: state %v", m.state)
	}
	for i := 0; i < 2; i++ {
		if b, run := m.begin(); run || b != a || !closed(b) || b.err != boom {
			t.Fatalf("begin after a final failure: run %v, replayed %v", run, b.err)
		}
	}
}

// end refuses an attempt that is not the one running: a bug, not a state.
func TestLifetimeEndChecksItsAttempt(t *testing.T) {
	var l lifetime
	a, _ := l.begin()
	l.end(a, nil, true)
	defer func() {
		if recover() == nil {
			t.Error("a second end did not panic")
		}
	}()
	l.end(a, nil, true)
}
