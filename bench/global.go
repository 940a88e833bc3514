package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"simpler/engine"
	"simpler/hal"
)

// globalPhases are the node commands of one allocate + release, in the
// order the broker sends them. Each is sent once to each member node.
var globalPhases = []string{"COMM_INIT", "PREPARE", "IMPORT_TABLE", "COMMIT", "RELEASE_DOMAIN"}

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
	rtt, prtt := lim.rtt, lim.prtt

	p, err := hal.Lookup("a2a3sim")
	if err != nil {
		return false, err
	}
	top, err := engine.NewWorker(engine.Config{Level: 4, Platform: p})
	if err != nil {
		return false, err
	}
	// Runs before d.Close: the session ends with the worker's connection.
	defer func() {
		if cerr := top.Close(); err == nil && cerr != nil {
			ok, err = false, cerr
		}
	}()
	node, err := engine.NewWorker(engine.Config{Level: 3, Platform: p, DeviceIDs: []int{0, 1}})
	if err != nil {
		return false, err
	}
	local, err := top.AddWorker(node)
	if err != nil {
		return false, err
	}
	remote, err := top.AddRemoteWorker(engine.RemoteSpec{Endpoint: addr, Platform: "a2a3sim", DeviceIDs: []int{0, 1}})
	if err != nil {
		return false, err
	}

	// The observer collects the steps of the iteration being measured,
	// and ignores those of warm-up and empty runs.
	var mu sync.Mutex
	var steps []globalStep
	recording := false
	top.Observe(func(e engine.Event) {
		if e.Kind != engine.GlobalStep {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if recording {
			steps = append(steps, globalStep{e.Callable, strings.HasPrefix(e.Worker, "remote_worker"), e.Dur})
		}
	})
	if err := top.Init(); err != nil {
		return false, err
	}

	spec := engine.GlobalSpec{Name: "bench", WindowSize: 4096,
		Members: [][2]int{{local, 0}, {local, 1}, {remote, 0}, {remote, 1}}}
	// One allocate + release: the release only marks the handle, and the
	// run's fence, inside Run, frees the domain on both nodes.
	allocRelease := func() error {
		_, err := top.Run(func(o *engine.Orchestrator) (any, error) {
			g, err := o.AllocateGlobalDomain(spec)
			if err != nil {
				return nil, err
			}
			return nil, g.Release()
		})
		return err
	}
	for i := 0; i < 5; i++ { // warm up: session, comm pool, windows
		if err := allocRelease(); err != nil {
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

	// Each iteration is timed end to end and its steps summed per phase:
	// both nodes, and the remote node alone. "total" is every step.
	const iters = 201
	ends := make([]time.Duration, iters)
	both := map[string][]time.Duration{}
	rem := map[string][]time.Duration{}
	for i := range ends {
		mu.Lock()
		steps, recording = nil, true
		mu.Unlock()
		start := time.Now()
		err := allocRelease()
		ends[i] = time.Since(start)
		mu.Lock()
		got := steps
		steps, recording = nil, false
		mu.Unlock()
		if err != nil {
			return false, err
		}
		if len(got) != 2*len(globalPhases) {
			return false, fmt.Errorf("global: iteration %d saw %d node commands, want %d", i, len(got), 2*len(globalPhases))
		}
		sum := map[string]time.Duration{}
		rsum := map[string]time.Duration{}
		for _, s := range got {
			sum[s.cmd] += s.dur
			sum["total"] += s.dur
			if s.remote {
				rsum[s.cmd] += s.dur
				rsum["total"] += s.dur
			}
		}
		for _, k := range append(globalPhases, "total") {
			both[k] = append(both[k], sum[k])
			rem[k] = append(rem[k], rsum[k])
		}
	}
	end := mid(ends)

	fmt.Fprintf(w, "global: allocate + release of a 4-rank global domain over 2 level-3 nodes (one local, one remote on 127.0.0.1)\n")
	fmt.Fprintf(w, "  %-34s %8.1f us\n", "loopback TCP 64-byte round trip", micros(rtt))
	fmt.Fprintf(w, "  %-34s %8.1f us (for scale: %.1f of these end to end)\n", "round trip between two processes", micros(prtt), float64(end)/float64(prtt))
	fmt.Fprintf(w, "  %-34s %8.1f us\n", "empty run (fixed cost)", micros(empty))
	fmt.Fprintf(w, "  %-34s %8.1f us   median of %d runs\n", "allocate + release, end to end", micros(end), iters)
	fmt.Fprintf(w, "  node commands, median per run: both nodes, then the remote node's share\n")
	for _, k := range append(globalPhases, "total") {
		name := k
		if k == "total" {
			name = "all node commands"
		}
		fmt.Fprintf(w, "    %-32s %8.1f us   remote %8.1f us\n", name, micros(mid(both[k])), micros(mid(rem[k])))
	}
	ok = verdict(w, "global alloc+release / TCP round trip", float64(end)/float64(rtt), 10, "x")
	return ok, nil
}
