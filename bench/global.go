package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"simpler/engine"
	"simpler/engine/global"
	"simpler/engine/remote"
	"simpler/hal"
)

// globalPhases are the node commands of one allocate + release, in the
// order the broker sends them: a warm domain (the same members and window
// size as the one before) is REATTACH then RELEASE_DOMAIN, a cold one the
// full transaction. Each is sent once to each member node.
var globalPhases = []string{"REATTACH", "COMM_INIT", "PREPARE", "IMPORT_TABLE", "COMMIT", "ABORT", "RELEASE_DOMAIN"}

// warmPhases is how many phases a warm allocate + release takes.
const warmPhases = 2

// globalStep is one node command as the broker timed it (a GlobalStep
// event).
type globalStep struct {
	cmd    string
	remote bool
	dur    time.Duration
}

// Global prints the cost of allocating and releasing a 4-rank global
// domain over two level-3 nodes, one in this process and one a session of
// a real daemon on 127.0.0.1, against the loopback TCP round trip measured
// in the same run. The broker's GlobalStep events split the time by phase
// and by node.
func Global(w io.Writer) (ok bool, err error) {
	lim, d, addr, err := remoteSetup()
	if err != nil {
		return false, err
	}
	defer d.Close()

	p, err := hal.Lookup("a2a3sim")
	if err != nil {
		return false, err
	}
	top, err := engine.NewWorker(engine.Config{Level: 4, Platform: p, Dial: remote.Dial})
	if err != nil {
		return false, err
	}
	// Runs before d.Close: the session ends with the worker's connection.
	defer func() {
		if cerr := top.Close(); err == nil && cerr != nil {
			ok, err = false, cerr
		}
	}()
	b, err := newGlobalBench(top, p, addr)
	if err != nil {
		return false, err
	}
	for i := 0; i < 5; i++ { // warm up: session, comm pool, windows
		if err := b.allocRelease(); err != nil {
			return false, err
		}
	}
	empty, err := median(201, func() error {
		_, err := top.Run(func(o *engine.Orchestrator) (any, error) { return nil, nil })
		return err
	})
	if err != nil {
		return false, err
	}
	const iters = 201
	t, err := b.measure(iters)
	if err != nil {
		return false, err
	}
	t.print(w, lim, empty, iters)
	return verdict(w, "global alloc+release / TCP round trip", float64(t.end)/float64(lim.rtt), 10, "x"), nil
}

// globalBench is the level-4 worker of Global with its two nodes, and the
// node commands its observer records.
type globalBench struct {
	top  *engine.Worker
	spec global.Spec

	mu        sync.Mutex
	steps     []globalStep
	recording bool // only the measured iterations', not warm-up's or empty runs'
}

// newGlobalBench adds a local node and a node on the daemon at addr, each
// of two chips, to top, observes top's node commands and initialises it.
func newGlobalBench(top *engine.Worker, p hal.Platform, addr string) (*globalBench, error) {
	node, err := engine.NewWorker(engine.Config{Level: 3, Platform: p, DeviceIDs: []int{0, 1}})
	if err != nil {
		return nil, err
	}
	local, err := top.AddWorker(node)
	if err != nil {
		return nil, err
	}
	remote, err := top.AddRemoteWorker(engine.RemoteSpec{Endpoint: addr, Platform: "a2a3sim", DeviceIDs: []int{0, 1}})
	if err != nil {
		return nil, err
	}
	b := &globalBench{top: top, spec: global.Spec{Name: "bench", WindowSize: 4096,
		Members: [][2]int{{local, 0}, {local, 1}, {remote, 0}, {remote, 1}}}}
	top.Events().Observe(b.observe)
	if err := top.Init(); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *globalBench) observe(e engine.Event) {
	if e.Kind != engine.GlobalStep {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.recording {
		b.steps = append(b.steps, globalStep{e.Callable, strings.HasPrefix(e.Worker, "remote_worker"), e.Dur})
	}
}

// allocRelease is one allocate + release: the release only marks the
// handle, and the run's fence, inside Run, frees the domain on both nodes.
func (b *globalBench) allocRelease() error {
	_, err := b.top.Run(func(o *engine.Orchestrator) (any, error) {
		g, err := global.Allocate(o, b.spec)
		if err != nil {
			return nil, err
		}
		return nil, g.Release()
	})
	return err
}

// recorded runs one allocRelease, timed end to end, and returns the node
// commands it sent.
func (b *globalBench) recorded() (time.Duration, []globalStep, error) {
	b.mu.Lock()
	b.steps, b.recording = nil, true
	b.mu.Unlock()
	start := time.Now()
	err := b.allocRelease()
	end := time.Since(start)
	b.mu.Lock()
	got := b.steps
	b.steps, b.recording = nil, false
	b.mu.Unlock()
	return end, got, err
}

// globalTimes are the medians Global prints: end to end, and per phase
// (and "total", every step) for both nodes and for the remote node alone.
type globalTimes struct {
	end       time.Duration
	both, rem map[string]time.Duration
	cold      int // iterations that were not warm (a REATTACH fell back)
}

// measure times iters allocate + release iterations, each with its node
// commands summed per phase, and returns the medians.
func (b *globalBench) measure(iters int) (globalTimes, error) {
	ends := make([]time.Duration, iters)
	cold := 0
	both := map[string][]time.Duration{}
	rem := map[string][]time.Duration{}
	for i := range ends {
		end, got, err := b.recorded()
		if err != nil {
			return globalTimes{}, err
		}
		if len(got) != 2*warmPhases {
			cold++ // counted and printed: the medians are of every iteration
		}
		ends[i] = end
		sum, rsum := phaseSums(got)
		for _, k := range append(globalPhases, "total") {
			both[k] = append(both[k], sum[k])
			rem[k] = append(rem[k], rsum[k])
		}
	}
	t := globalTimes{end: mid(ends), both: map[string]time.Duration{}, rem: map[string]time.Duration{}, cold: cold}
	for k := range both {
		t.both[k], t.rem[k] = mid(both[k]), mid(rem[k])
	}
	return t, nil
}

// phaseSums adds up one iteration's node commands per phase and in
// "total": over both nodes, and over the remote node alone.
func phaseSums(steps []globalStep) (sum, rsum map[string]time.Duration) {
	sum, rsum = map[string]time.Duration{}, map[string]time.Duration{}
	for _, s := range steps {
		sum[s.cmd] += s.dur
		sum["total"] += s.dur
		if s.remote {
			rsum[s.cmd] += s.dur
			rsum["total"] += s.dur
		}
	}
	return sum, rsum
}

func (t globalTimes) print(w io.Writer, lim limits, empty time.Duration, iters int) {
	fmt.Fprintf(w, "global: allocate + release of a 4-rank global domain over 2 level-3 nodes (one local, one remote on 127.0.0.1)\n")
	fmt.Fprintf(w, "  %-34s %8.1f us\n", "loopback TCP 64-byte round trip", micros(lim.rtt))
	fmt.Fprintf(w, "  %-34s %8.1f us (for scale: %.1f of these end to end)\n", "round trip between two processes", micros(lim.prtt), float64(t.end)/float64(lim.prtt))
	fmt.Fprintf(w, "  %-34s %8.1f us\n", "empty run (fixed cost)", micros(empty))
	fmt.Fprintf(w, "  %-34s %8.1f us   median of %d runs\n", "allocate + release, end to end", micros(t.end), iters)
	if t.cold > 0 {
		fmt.Fprintf(w, "  %d of %d runs were not warm (REATTACH fell back to the full transaction)\n", t.cold, iters)
	}
	fmt.Fprintf(w, "  node commands, median per run: both nodes, then the remote node's share\n")
	for _, k := range append(globalPhases, "total") {
		name := k
		if k == "total" {
			name = "all node commands"
		} else if t.both[k] == 0 {
			continue // a phase a warm domain does not send
		}
		fmt.Fprintf(w, "    %-32s %8.1f us   remote %8.1f us\n", name, micros(t.both[k]), micros(t.rem[k]))
	}
}
