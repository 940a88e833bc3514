package bench

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"simpler/engine"
	"simpler/hal"
	"simpler/starlib"
)

// The collectives benchmark times the @simpler//collectives.star library
// in this process, beside a memcpy measured in the same run: on a shared
// machine only ratios travel.

// collSizes are the per-rank input sizes, in bytes.
var collSizes = []int{4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20}

// collRanks are the rank counts.
var collRanks = []int{2, 4}

// collReps keeps the whole benchmark to about a minute on two cores: few
// runs of the big sizes, more of the small ones (medians of odd counts).
// A small call takes tens of microseconds and its time on a shared
// two-core machine spreads by 2-3x from call to call (a wake-up, a GC
// cycle), so its median needs a few hundred calls to hold still: with 21,
// the 4 KiB figure moved by half between runs.
func collReps(size int) int {
	switch {
	case size >= 64<<20:
		return 3
	case size >= 16<<20:
		return 5
	case size >= 1<<20:
		return 9
	case size >= 64<<10:
		return 51
	}
	return 301
}

// collectivesScript times each collective over each rank count and size
// (argv: sizes..., then "--", then rank counts...). It prints one line
// per point: "coll NAME ALGO RANKS BYTES MEDIAN_NS", then the time of
// allocate+release pairs: "pairs RANKS COUNT NS_TOTAL" for that many
// pairs in one run, and "pairrun RANKS MEDIAN_NS" for runs of one pair
// each, and "emptyrun MEDIAN_NS" for runs that do nothing.
//
// Buffers are allocated once at the largest size and reused through
// views, so the script touches about 1.3 GiB of host memory in all.
//
// Each rank count runs its sizes largest first. Timed first, right after
// that setup, 4 KiB calls took 11-34 µs (half the runs near 30) where the
// same calls a few seconds later took 7-14 µs in every run; a collection
// and a return of the freed memory to the system before timing did not
// change it. The figure is a call's steady cost, so the small sizes come
// last.
const collectivesScript = `
load("@simpler//collectives.star", "collectives")

def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]

def reps(nbytes):
    return int(REPS[str(nbytes)])

def timed(w, fn, count):
    ts = []
    for _ in range(count + 1):   # the first run warms the window pool
        t0 = time.now()
        w.run(fn)
        ts.append((time.now() - t0).nanoseconds)
    return median(ts[1:])

def views(ts, n, count):
    return [t.view(shape = [count]) for t in ts[:n]]

def main(ctx):
    split = ctx.argv.index("--")
    sizes = [int(a) for a in ctx.argv[:split]]
    ranks = [int(a) for a in ctx.argv[split + 1:]]
    chips = max(ranks)
    w = Worker(level = 3, platform = "a2a3sim", device_ids = list(range(chips)), mode = ctx.mode)
    c = collectives(w)
    w.init()
    most = max(sizes) // 4
    ins = [host_tensor(data = array.full(most, float(r + 1), FLOAT32)) for r in range(chips)]
    outs = [host_tensor(shape = [chips * most], dtype = FLOAT32) for r in range(chips)]
    for n in ranks:
        ws = list(range(n))
        for nbytes in reversed(sizes):
            L = nbytes // 4
            x = views(ins, n, L)
            y = views(outs, n, L)
            for algo in ALLREDUCE:
                t = timed(w, lambda o, a, cfg: c.allreduce(o, x, y, workers = ws, algo = algo), reps(nbytes))
                print("coll allreduce", algo, n, nbytes, t)
            if not OTHERS:
                continue
            t = timed(w, lambda o, a, cfg: c.broadcast(o, x, y, workers = ws, root = 0), reps(nbytes))
            print("coll broadcast auto", n, nbytes, t)
            t = timed(w, lambda o, a, cfg: c.all_to_all(o, x, y, workers = ws), reps(nbytes))
            print("coll all_to_all auto", n, nbytes, t)
            t = timed(w, lambda o, a, cfg: c.reduce_scatter(o, x, views(outs, n, L // n), workers = ws), reps(nbytes))
            print("coll reduce_scatter auto", n, nbytes, t)
            t = timed(w, lambda o, a, cfg: c.allgather(o, x, views(outs, n, L * n), workers = ws), reps(nbytes))
            print("coll allgather auto", n, nbytes, t)
    w.close()
`

// collPoint is one measured collective.
type collPoint struct {
	name, algo  string
	ranks, size int
	t           time.Duration
}

// busFactor is nccl-tests' bus bandwidth factor.
func busFactor(name string, n int) float64 {
	switch name {
	case "allreduce":
		return 2 * float64(n-1) / float64(n)
	case "broadcast":
		return 1
	}
	return float64(n-1) / float64(n)
}

// algSize is the size nccl-tests divides by the time: the buffer of
// allreduce, broadcast, reduce_scatter (its input) and all_to_all, and
// the whole output of allgather.
func algSize(p collPoint) int {
	if p.name == "allgather" {
		return p.size * p.ranks
	}
	return p.size
}

// collPlan is what one run of collectivesScript measures.
type collPlan struct {
	mode     string           // "thread" or "process"
	launcher *engine.Launcher // process mode's child processes
	sizes    []int
	ranks    []int
	algos    []string // allreduce's algorithms
	others   bool     // also the other four collectives (algo "auto")
}

// allreduceAlgos are every allreduce algorithm: "auto" (the default,
// which picks direct for host tensors), "direct" and the window ones.
var allreduceAlgos = []string{"auto", "direct", "onephase", "twophase", "ring", "bidirectional_ring"}

// header is the Starlark prelude that hands the plan to the script.
func (p collPlan) header() string {
	reps := []string{}
	for _, s := range p.sizes {
		reps = append(reps, fmt.Sprintf("%q: %d", fmt.Sprint(s), collReps(s)))
	}
	algos := []string{}
	for _, a := range p.algos {
		algos = append(algos, fmt.Sprintf("%q", a))
	}
	others := "False"
	if p.others {
		others = "True"
	}
	return "REPS = {" + strings.Join(reps, ", ") + "}\nALLREDUCE = [" + strings.Join(algos, ", ") + "]\nOTHERS = " + others + "\n"
}

// runCollectivesScript runs collectivesScript in this process (its chips
// in child processes in process mode).
func runCollectivesScript(p collPlan) ([]collPoint, error) {
	dir, err := os.MkdirTemp("", "simpler-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "collectives.star")
	if err := os.WriteFile(path, []byte(p.header()+collectivesScript), 0o600); err != nil {
		return nil, err
	}
	var argv []string
	for _, s := range p.sizes {
		argv = append(argv, fmt.Sprint(s))
	}
	argv = append(argv, "--")
	for _, n := range p.ranks {
		argv = append(argv, fmt.Sprint(n))
	}
	var out bytes.Buffer
	s := starlib.NewSession("a2a3sim", nil, p.mode, argv, &out, &out)
	s.Launcher = p.launcher
	err = s.RunFile(path)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("%s\n%s", starlib.Backtrace(err), out.String())
	}
	var pts []collPoint
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var tag string
		var pt collPoint
		var ns int64
		if _, e := fmt.Sscan(line, &tag, &pt.name, &pt.algo, &pt.ranks, &pt.size, &ns); e != nil || tag != "coll" {
			return nil, fmt.Errorf("bench script printed %q", line)
		}
		pt.t = time.Duration(ns)
		pts = append(pts, pt)
	}
	return pts, nil
}

// memcpyBandwidth copies size bytes between two buffers touched
// beforehand and returns the median bandwidth in bytes per second.
func memcpyBandwidth(size, reps int) float64 {
	a, b := make([]byte, size), make([]byte, size)
	for i := range a {
		a[i], b[i] = byte(i), byte(i>>8)
	}
	t, _ := median(reps, func() error {
		copy(b, a)
		return nil
	})
	return float64(size) / t.Seconds()
}

// domainPairs times allocate+release pairs of a domain over `ranks`
// chips through the engine's Go API: per pair when each run holds one pair
// (its free happens at that run's fence, so the time includes it), per
// pair when one run holds `count` pairs, and an empty run for reference.
func domainPairs(ranks, count int) (perRun, inOneRun, empty time.Duration, err error) {
	p, err := hal.Lookup("a2a3sim")
	if err != nil {
		return
	}
	ids := make([]int, ranks)
	for i := range ids {
		ids[i] = i
	}
	w, err := engine.NewWorker(engine.Config{Level: 3, Platform: p, DeviceIDs: ids, Mode: "thread"})
	if err != nil {
		return
	}
	defer w.Close()
	if err = w.Init(); err != nil {
		return
	}
	pair := func(o *engine.Orchestrator, i int) error {
		d, err := o.AllocateDomain(engine.DomainSpec{Name: fmt.Sprintf("bench.%d", i), Workers: ids, WindowSize: 4096, TaskOnly: true})
		if err != nil {
			return err
		}
		return d.Release()
	}
	i := 0
	run := func(n int) func() error {
		return func() error {
			_, err := w.Run(func(o *engine.Orchestrator) (any, error) {
				for k := 0; k < n; k++ {
					i++
					if err := pair(o, i); err != nil {
						return nil, err
					}
				}
				return nil, nil
			})
			return err
		}
	}
	if empty, err = median(count, run(0)); err != nil {
		return
	}
	if err = run(1)(); err != nil { // warm the window pool
		return
	}
	if perRun, err = median(count, run(1)); err != nil {
		return
	}
	start := time.Now()
	if err = run(count)(); err != nil {
		return
	}
	inOneRun = time.Since(start) / time.Duration(count)
	return
}

// atLeast prints a figure with a lower limit, like verdict does for an
// upper one.
func atLeast(w io.Writer, what string, got, target float64, unit string) bool {
	ok := got >= target
	mark := "ok"
	if !ok {
		mark = "UNDER TARGET"
	}
	fmt.Fprintf(w, "  %-34s %10.2f %-6s (target >= %.2f) %s\n", what, got, unit, target, mark)
	return ok
}

func sizeName(b int) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<10:
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d B", b)
}

// Collectives prints the collectives benchmark: every point of thread
// mode, the process-mode allreduce beside it, the Open MPI peer measured
// in the same run, and the table of figures against their goals
// (collTable). It reports whether every goal was met; an error is a
// failure to run.
func Collectives(w io.Writer, l *engine.Launcher) (bool, error) {
	const small, big = 4 << 10, 64 << 20
	memcpy := memcpyBandwidth(big, 9)
	pts, err := runCollectivesScript(collPlan{mode: "thread", sizes: collSizes, ranks: collRanks, algos: allreduceAlgos, others: true})
	if err != nil {
		return false, err
	}
	procPts, err := runCollectivesScript(collPlan{mode: "process", launcher: l, sizes: []int{small, big}, ranks: []int{4}, algos: []string{"auto"}})
	if err != nil {
		return false, fmt.Errorf("process mode: %w", err)
	}
	peer, note, err := runMPIPeer(collRanks, small, big)
	if err != nil {
		return false, err
	}
	memcpy = max(memcpy, memcpyBandwidth(big, 9)) // the less disturbed of before/after
	perRun, inOneRun, empty, err := domainPairs(4, 200)
	if err != nil {
		return false, err
	}

	fmt.Fprintf(w, "collectives: @simpler//collectives.star, a2a3sim; size = per-rank input\n")
	fmt.Fprintf(w, "  memcpy of %s: %.2f GB/s (median of 9, best of before/after)\n", sizeName(big), memcpy/1e9)
	fmt.Fprintf(w, "  algbw = S/t with S as nccl-tests: the buffer, allgather's whole output; busbw = algbw x factor\n")
	printPoints(w, "thread", pts, memcpy)
	printPoints(w, "process", procPts, memcpy)
	fmt.Fprintf(w, "  domain allocate+release, 4 ranks: %.1f us per run of one pair (an empty run: %.1f us), %.1f us per pair in a run of 200\n",
		micros(perRun), micros(empty), micros(inOneRun))
	fmt.Fprintf(w, "  %s\n", note)
	t := collFigures{pts: pts, procPts: procPts, memcpy: memcpy, peer: peer, domain: max(perRun-empty, 0)}
	return t.table(w), nil
}

// printPoints prints one mode's points, sorted by collective, ranks,
// size and algorithm.
func printPoints(w io.Writer, mode string, pts []collPoint, memcpy float64) {
	fmt.Fprintf(w, "  %-15s %-19s %5s %8s %11s %9s %9s %7s   (%s mode)\n", "collective", "algo", "ranks", "size", "time", "algbw", "busbw", "/memcpy", mode)
	sort.SliceStable(pts, func(i, j int) bool {
		a, b := pts[i], pts[j]
		if a.name != b.name {
			return a.name < b.name
		}
		if a.ranks != b.ranks {
			return a.ranks < b.ranks
		}
		if a.size != b.size {
			return a.size < b.size
		}
		return a.algo < b.algo
	})
	for _, p := range pts {
		alg := float64(algSize(p)) / p.t.Seconds()
		bus := alg * busFactor(p.name, p.ranks)
		fmt.Fprintf(w, "  %-15s %-19s %5d %8s %9.3f ms %6.2f GB/s %6.2f GB/s %6.3f\n",
			p.name, p.algo, p.ranks, sizeName(p.size), float64(p.t)/float64(time.Millisecond), alg/1e9, bus/1e9, bus/memcpy)
	}
}
