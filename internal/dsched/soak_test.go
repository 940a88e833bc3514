package dsched

import (
	"os"
	"reflect"
	"testing"
	"time"
)

// soakEnv, when set, makes TestSoakReplay run thousands of seeds instead
// of a handful.
const soakEnv = "SIMPLER_DSCHED_SOAK"

// barrierRounds is a program of n workers that meet at a counting
// barrier each round (every one blocks until all arrived), yield between
// rounds, and record the order they passed it in.
func barrierRounds(w *world, m *Proc, n, rounds int) {
	arrived := make([]int, rounds)
	for i := 0; i < n; i++ {
		w.spawn(m, "worker", func(p *Proc) {
			for r := 0; r < rounds; r++ {
				arrived[r]++
				if _, err := p.Block("barrier", func() bool { return arrived[r] == n }, 0); err != nil {
					w.fail("round %d: %v", r, err)
					return
				}
				w.note("%d passed %d", p.ID(), r)
				p.Yield("between")
			}
		})
	}
}

func TestManyProcsMeetAtABarrierAndReplay(t *testing.T) {
	run := func() outcome {
		w := newWorld(t, NewRandom(21))
		w.run(func(m *Proc) { barrierRounds(w, m, 100, 5) })
		return w.outcome()
	}
	start := time.Now()
	first := run()
	if len(first.log) != 500 || first.steps < 1000 {
		t.Fatalf("%d passes logged in %d steps, want 500 in over 1000", len(first.log), first.steps)
	}
	if again := run(); !reflect.DeepEqual(again, first) {
		t.Fatal("a replay of 100 Procs differed")
	}
	t.Logf("2 runs of %d steps in %v", first.steps, time.Since(start))
}

func TestSoakReplay(t *testing.T) {
	seeds := uint64(20)
	if os.Getenv(soakEnv) != "" {
		seeds = 3000
	}
	deadline := time.Now().Add(4 * time.Minute)
	for seed := uint64(0); seed < seeds && time.Now().Before(deadline); seed++ {
		for name := range strategies(t, seed) {
			a := runMixed(t, strategies(t, seed)[name])
			b := runMixed(t, strategies(t, seed)[name])
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("%s seed %d: replay differs:\n%v\n%v", name, seed, a.trace, b.trace)
			}
		}
	}
}
