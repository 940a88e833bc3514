package dsched

import "simpler/kind"

// Strategy picks which Proc runs at each scheduling point. It is told of
// every Proc as it is created (ids are handed out 0, 1, 2, … in creation
// order) and is asked at every decision. A Strategy is driven by one
// Sched, only by the goroutine that holds the token, so it needs no lock;
// its choices must depend only on its seed and on what it is told, never
// on the wall clock or on map order, so that a seed replays.
type Strategy interface {
	// Created tells the strategy that Proc id now exists.
	Created(id int)
	// Pick returns the index in runnable (ids in ascending order, never
	// empty) of the Proc to run next. step numbers the decisions from 1;
	// running is the id of the Proc that reached the point (it may have
	// blocked or exited, so it need not be in runnable), or -1.
	Pick(step, running int, runnable []int) int
}

// rng is splitmix64 (Steele, Lea and Flood, 2014): one 64-bit word of
// state and a fixed formula, so a seed gives the same sequence on every
// machine and every Go release, which no library generator promises for
// its derived methods.
type rng struct{ state uint64 }

func (r *rng) next() uint64 {
	r.state += 0x9e3779b97f4a7c15
	z := r.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn returns a number in [0, n), n > 0, without modulo bias: draws
// below the largest multiple of n that fits are kept, the rest redrawn.
func (r *rng) intn(n int) int {
	bound := uint64(n)
	reject := -bound % bound // 2^64 mod n: the short tail to redraw
	for {
		x := r.next()
		if x >= reject {
			return int(x % bound)
		}
	}
}

// Random is the uniform strategy: at each point every runnable Proc is
// equally likely to run next.
type Random struct{ r rng }

// NewRandom returns the uniform strategy seeded with seed.
func NewRandom(seed uint64) *Random { return &Random{r: rng{state: seed}} }

// Created does nothing: the uniform strategy keeps no per-Proc state.
func (s *Random) Created(id int) {}

// Pick returns a uniformly random index into runnable. A point with one
// choice draws nothing, so the sequence depends only on real choices.
func (s *Random) Pick(step, running int, runnable []int) int {
	if len(runnable) == 1 {
		return 0
	}
	return s.r.intn(len(runnable))
}

// DefaultPCTDepth is --pct-depth's default: PCT looks for bugs that need
// up to 3 ordering constraints.
const DefaultPCTDepth = 3

// DefaultPCTSteps is the step-count estimate PCT spreads its change
// points over when no earlier run gave a better one (Sched.Steps of a
// run of the same program is the estimate to pass).
const DefaultPCTSteps = 1000

// PCT is probabilistic concurrency testing (Burckhardt, Kothari, Musuvathi
// and Nagarakatte, ASPLOS 2010). Every Proc gets a random priority as it
// is created, all of them at least depth; the highest-priority runnable
// Proc always runs (ties, which need two equal 63-bit draws, go to the
// lower id); and at each of depth-1 change points, steps drawn uniformly
// from [1, steps], the Proc that reached the point drops to priority i
// (the i-th change point, 1-based), below every initial priority. A bug
// that needs d ordering constraints among n Procs in k steps is found in
// one run with probability at least 1/(n·k^(d-1)) when depth is d.
type PCT struct {
	r       rng
	depth   int
	prio    []uint64 // by Proc id
	changes []int    // changes[i] is the step of change point i+1

	// A Proc picked spinBound times in a row while others could run is
	// spinning (a kernel polling a flag another Proc sets): it drops to
	// the lowest priority, so that the others run. Plain PCT would let it
	// starve them for ever.
	last, streak int
}

// spinBound is how many decisions in a row PCT lets one Proc take while
// others are runnable.
const spinBound = 2048

// NewPCT returns the PCT strategy for seed, looking for bugs of depth up
// to depth (>= 1) in runs of about steps (>= 1) decisions.
func NewPCT(seed uint64, depth, steps int) (*PCT, error) {
	if depth < 1 {
		return nil, kind.Errorf(kind.ValueError, "dsched: PCT depth %d: want 1 or more", depth)
	}
	if steps < 1 {
		return nil, kind.Errorf(kind.ValueError, "dsched: PCT steps %d: want 1 or more", steps)
	}
	s := &PCT{r: rng{state: seed}, depth: depth, changes: make([]int, depth-1), last: -1}
	for i := range s.changes {
		s.changes[i] = 1 + s.r.intn(steps)
	}
	return s, nil
}

// Created draws id's initial priority: at least depth, so above every
// priority a change point gives.
func (s *PCT) Created(id int) {
	s.prio = append(s.prio, uint64(s.depth)+s.r.next()>>1)
}

// Pick applies the change points that fall on step, then returns the
// runnable Proc of highest priority.
func (s *PCT) Pick(step, running int, runnable []int) int {
	for i, at := range s.changes {
		if at == step && running >= 0 {
			s.prio[running] = uint64(i + 1)
		}
	}
	best := s.highest(runnable)
	switch {
	case runnable[best] != s.last || len(runnable) == 1:
		s.streak = 0
	case s.streak+1 < spinBound:
		s.streak++
	default: // spinning: let the others run
		s.prio[s.last], s.streak = 0, 0
		best = s.highest(runnable)
	}
	s.last = runnable[best]
	return best
}

// highest is the index in runnable of the Proc of highest priority (the
// first among ties).
func (s *PCT) highest(runnable []int) int {
	best := 0
	for i, id := range runnable {
		if s.prio[id] > s.prio[runnable[best]] {
			best = i
		}
	}
	return best
}
