package dsched

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// lowest always picks the lowest runnable id: a strategy with no
// randomness, so that a test of the core knows every answer.
type lowest struct{}

func (lowest) Created(int)                                {}
func (lowest) Pick(step, running int, runnable []int) int { return 0 }

// steppedCore returns a core running with Procs named names (the first
// holds the token), and the Procs.
func steppedCore(strat Strategy, names ...string) (*core, []*Proc) {
	c := newCore(strat)
	var ps []*Proc
	for _, n := range names {
		p := &Proc{name: n}
		c.spawn(p)
		ps = append(ps, p)
	}
	c.cur = ps[0]
	return c, ps
}

func TestCoreSpawnKeepsTheRunner(t *testing.T) {
	c, ps := steppedCore(alternate{}, "main")
	a := &Proc{name: "a"}
	c.spawn(a)
	if c.cur != ps[0] || a.id != 1 || a.state != runnable || c.steps != 0 {
		t.Fatalf("after spawn: cur %s, a id %d state %d, %d steps", c.cur.name, a.id, a.state, c.steps)
	}
	if next, _ := c.yield("p"); next != a {
		t.Fatalf("yield picked %s, want a", next.name)
	}
}

func TestCoreVirtualTime(t *testing.T) {
	c, ps := steppedCore(lowest{}, "m", "a", "b")
	m, a, b := ps[0], ps[1], ps[2]
	// step returns the Proc picked, checking that the decision reported
	// the waits stuck (nothing could run) exactly when stuck says.
	step := func(stuck []Wait) func(next *Proc, dl []Wait) *Proc {
		return func(next *Proc, dl []Wait) *Proc {
			t.Helper()
			if !reflect.DeepEqual(dl, stuck) {
				t.Fatalf("reported %v, want %v", dl, stuck)
			}
			return next
		}
	}
	if next := step(nil)(c.block("m", nil, 30*time.Millisecond)); next != a {
		t.Fatalf("picked %v", next.name)
	}
	if next := step(nil)(c.block("a", nil, 10*time.Millisecond)); next != b {
		t.Fatalf("picked %v", next.name)
	}
	// Nothing can run: reported at once, then time jumps to the earliest
	// deadline, and of a and b, tied at 10ms, a (the lower id) wakes alone.
	all := []Wait{{0, "m", "m", 30 * time.Millisecond}, {1, "a", "a", 10 * time.Millisecond}, {2, "b", "b", 10 * time.Millisecond}}
	if next := step(all)(c.block("b", nil, 10*time.Millisecond)); next != a || !a.timedOut || c.now != 10*time.Millisecond || b.state != blocked {
		t.Fatalf("picked %s timedOut %v at %v, b state %d", next.name, a.timedOut, c.now, b.state)
	}
	// b's deadline has come: it wakes at the next point, with no jump.
	if next := step(nil)(c.exit()); next != b || !b.timedOut || c.now != 10*time.Millisecond {
		t.Fatalf("picked %s timedOut %v at %v", next.name, b.timedOut, c.now)
	}
	if next := step([]Wait{{0, "m", "m", 30 * time.Millisecond}})(c.exit()); next != m || !m.timedOut || c.now != 30*time.Millisecond {
		t.Fatalf("picked %s timedOut %v at %v", next.name, m.timedOut, c.now)
	}
	if next := step(nil)(c.exit()); next != nil || c.cur != nil {
		t.Fatalf("every Proc exited, yet %v runs", next)
	}
}

func TestCoreReadyWinsOverADeadlineThatCame(t *testing.T) {
	c, ps := steppedCore(lowest{}, "m", "a")
	flag := false
	c.block("flag", func() bool { return flag }, 5*time.Millisecond)
	flag = true
	c.now = 5 * time.Millisecond // as if a jump had brought it there
	if next, _ := c.yield("a"); next != ps[0] || ps[0].timedOut {
		t.Fatalf("picked %s, timedOut %v: a condition that holds wakes without a timeout", next.name, ps[0].timedOut)
	}
}

func TestCoreDeadlockWakesEveryWaitWithTheError(t *testing.T) {
	c, ps := steppedCore(lowest{}, "m", "a", "b")
	c.exit() // m; a runs
	c.block("x", func() bool { return false }, 0)
	next, dl := c.block("y", nil, 0) // b
	want := []Wait{{1, "a", "x", 0}, {2, "b", "y", 0}}
	if !reflect.DeepEqual(dl, want) {
		t.Fatalf("waits %v, want %v", dl, want)
	}
	if next != ps[1] || !errors.Is(ps[1].err, ErrDeadlock) || !errors.Is(ps[2].err, ErrDeadlock) || ps[2].state != runnable {
		t.Fatalf("picked %s; a err %v, b err %v state %d", next.name, ps[1].err, ps[2].err, ps[2].state)
	}
}

func TestCoreHashIsTheDecisions(t *testing.T) {
	script := func(points ...string) uint64 {
		c, _ := steppedCore(alternate{}, "m", "a")
		for _, p := range points {
			c.yield(p)
		}
		c.block("w", nil, time.Second) // a jump
		return c.hash
	}
	h := script("p", "q")
	if script("p", "q") != h {
		t.Fatal("one script, two hashes")
	}
	if script("p", "r") == h || script("p") == h || script("p", "q", "q") == h {
		t.Fatal("different decisions, one hash")
	}
}

func TestSplitmixSequence(t *testing.T) {
	// splitmix64's published first outputs for seed 0.
	r := rng{}
	for _, want := range []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f} {
		if got := r.next(); got != want {
			t.Fatalf("next = %#x, want %#x", got, want)
		}
	}
	// intn stays in range and reaches every value.
	seen := map[int]int{}
	r = rng{state: 42}
	for i := 0; i < 3000; i++ {
		seen[r.intn(3)]++
	}
	for v := 0; v < 3; v++ {
		if seen[v] < 800 || seen[v] > 1200 {
			t.Errorf("intn(3) gave %d %d times of 3000", v, seen[v])
		}
	}
	if len(seen) != 3 {
		t.Errorf("intn(3) gave %v", seen)
	}
}

func TestPCTPicksHighestAndDropsAtChangePoints(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		s := pct(t, seed, 3, 10)
		for id := 0; id < 4; id++ {
			s.Created(id)
			if s.prio[id] < 3 {
				t.Fatalf("seed %d: initial priority %d below the depth", seed, s.prio[id])
			}
		}
		if len(s.changes) != 2 {
			t.Fatalf("seed %d: %d change points for depth 3", seed, len(s.changes))
		}
		all := []int{0, 1, 2, 3}
		for step := 1; step <= 10; step++ {
			running := step % 4
			want := make([]uint64, 4)
			copy(want, s.prio)
			for i, at := range s.changes {
				if at == step {
					want[running] = uint64(i + 1)
				}
			}
			best := 0
			for id := range want {
				if want[id] > want[best] {
					best = id
				}
			}
			if got := s.Pick(step, running, all); all[got] != best || !reflect.DeepEqual(s.prio, want) {
				t.Fatalf("seed %d step %d: picked %d prio %v, want %d %v", seed, step, got, s.prio, best, want)
			}
		}
	}
}
