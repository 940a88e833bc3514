package bench

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"simpler/engine"
	"simpler/engine/global"
	"simpler/hal"
	"simpler/hal/comm"
)

// The pod benchmark: global domains at pod scale. A level-4 worker over
// local level-3 nodes of 16 chips each (thread mode), for 64, 256 and 1024
// ranks, measured two ways. First what a script gets (podscript.go): the
// library's ring allreduce from a .star file run by `simpler run`, whose
// 1024-rank figure is the one with a target. Then the floor, in this
// process: the allocate + release of a domain over every chip, and a
// 4 KiB ring allreduce over it written in Go (2(n-1) steps, each a store
// into the next rank's window and a notify, as a kernel does; one
// goroutine per rank), with the process's resident memory while the
// domain is live.

// podSizes are the (nodes, chips per node) of each measurement.
var podSizes = [][2]int{{4, 16}, {16, 16}, {64, 16}}

// Pod prints the figures; the goal is a script's 1024-rank allocate +
// 4 KiB ring allreduce in at most 2 s with at most 1 GiB resident.
func Pod(w io.Writer) (bool, error) {
	fmt.Fprintln(w, "pod: global domains over local level-3 nodes of 16 chips (thread mode)")
	fmt.Fprintf(w, "  from a script: global_collectives(w).allreduce(..., algo = \"ring\"), 4 KiB per rank, `simpler run` in a process of its own\n")
	fmt.Fprintf(w, "  %6s %6s %14s %14s %12s %12s %10s\n", "ranks", "nodes", "first run", "warm (median)", "whole run", "its CPU", "peak RSS")
	var top podScript
	for _, sz := range podSizes {
		p, err := measurePodScript(sz[0])
		if err != nil {
			return false, err
		}
		fmt.Fprintf(w, "  %6d %6d %11.1f ms %11.1f ms %10.2f s %10.2f s %6d MiB\n", sz[0]*sz[1], sz[0],
			ms(p.cold), ms(p.warm), p.wall.Seconds(), p.cpu.Seconds(), p.peakRSS>>20)
		top = p
	}
	ok := verdict(w, "1024 ranks from a script: warm run", ms(top.warm), 2000, "ms")
	ok = verdict(w, "1024 ranks from a script: peak RSS", float64(top.peakRSS>>20), 1024, "MiB") && ok
	noteRow(Row{Figure: RowPod, Met: ok, Value: fmt.Sprintf("%.2f s warm (first run %.2f s), %d MiB",
		top.warm.Seconds(), top.cold.Seconds(), top.peakRSS>>20)})
	if err := podFloor(w); err != nil {
		return false, err
	}
	return ok, nil
}

// podFloor prints the Go-native figures, the floor a script's could reach.
func podFloor(w io.Writer) error {
	fmt.Fprintf(w, "  the floor (Go, no script; one process): allocate + release, and a ring written in Go over the engine's views\n")
	fmt.Fprintf(w, "  %6s %6s %14s %14s %14s %10s\n", "ranks", "nodes", "alloc+release", "ring 4 KiB", "total", "RSS")
	for _, sz := range podSizes {
		p, err := measurePod(sz[0], sz[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  %6d %6d %11.1f ms %11.1f ms %11.1f ms %6d MiB\n", sz[0]*sz[1], sz[0],
			ms(p.alloc), ms(p.ring), ms(p.alloc+p.ring), p.rss>>20)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// podTimes are one size's medians.
type podTimes struct {
	alloc, ring time.Duration
	rss         int64
}

func measurePod(nodes, chips int) (pt podTimes, err error) {
	top, err := podWorker(nodes, chips)
	if err != nil {
		return pt, err
	}
	defer func() {
		if cerr := top.Close(); err == nil {
			err = cerr
		}
	}()
	n := nodes * chips
	spec := global.Spec{Name: "pod", WindowSize: comm.RingWindow(n, 1024/n)}
	for r := 0; r < n; r++ {
		spec.Members = append(spec.Members, [2]int{r / chips, r % chips})
	}
	reps := max(3, 2048/n+1) | 1
	allocs := make([]time.Duration, 0, reps)
	rings := make([]time.Duration, 0, reps)
	for i := 0; i < reps+1; i++ { // the first is warm-up: pools, mappings
		var ring time.Duration
		start := time.Now()
		_, err := top.Run(func(o *engine.Orchestrator) (any, error) {
			d, err := global.Allocate(o, spec)
			if err != nil {
				return nil, err
			}
			t0 := time.Now()
			if err := podRing(top, d, n); err != nil {
				return nil, err
			}
			ring = time.Since(t0)
			pt.rss = max(pt.rss, residentBytes())
			return nil, d.Release()
		})
		if err != nil {
			return pt, err
		}
		if i > 0 {
			allocs, rings = append(allocs, time.Since(start)-ring), append(rings, ring)
		}
	}
	pt.alloc, pt.ring = mid(allocs), mid(rings)
	return pt, nil
}

// podWorker is a level-4 worker over nodes level-3 nodes of chips chips.
func podWorker(nodes, chips int) (*engine.Worker, error) {
	p, err := hal.Lookup("a2a3sim")
	if err != nil {
		return nil, err
	}
	top, err := engine.NewWorker(engine.Config{Level: 4, Platform: p})
	if err != nil {
		return nil, err
	}
	ids := make([]int, chips)
	for i := range ids {
		ids[i] = i
	}
	for i := 0; i < nodes; i++ {
		node, err := engine.NewWorker(engine.Config{Level: 3, Platform: p, DeviceIDs: ids})
		if err == nil {
			_, err = top.AddWorker(node)
		}
		if err != nil {
			return nil, err
		}
	}
	return top, top.Init()
}

// podRing runs the ring allreduce of 1024 float32 per rank over domain d
// and checks every rank's sum.
func podRing(top *engine.Worker, d *global.Domain, n int) error {
	ranks, err := global.OpenLocal(top, d.ID(), n)
	if err != nil {
		return err
	}
	const count = 1024
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acc := make([]float32, count)
			for i := range acc {
				acc[i] = float32(r + i)
			}
			errs[r] = comm.RingSum(ranks[r].Chip, ranks[r].View, r, n, count/n, acc, 60*time.Second)
			for i, v := range acc {
				if want := float32(n*(n-1)/2 + n*i); v != want && errs[r] == nil {
					errs[r] = fmt.Errorf("pod: rank %d element %d is %v, want %v", r, i, v, want)
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// residentBytes is this process's resident set (VmRSS), 0 if unknown.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
