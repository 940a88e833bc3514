package starlib

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/internal/dsched"
	"simpler/internal/race"
)

// windowScript runs the cases of CASES (written in by windowCases), each
// a window algorithm through the library or the ring kernel alone with
// small segments and few slots (so that items wrap round the slots), and
// prints every output whole. Outputs start as a pattern, so that an
// element a path fails to write shows; float values are not integers, so
// rounding must match too.
const windowScript = `
load("@simpler//collectives.star", "collectives")
load("@simpler//collective_kernels.star", "FAN", "RING", "fan_window", "ring_window", "slot_bytes")
load("cases.star", "CASES")

FLOATS = [FLOAT32, FLOAT16, BFLOAT16]
OPS = ["sum", "max", "min"]

def data(dt, count, seed):
    if dt == BOOL:
        return array.from_list([(i * 7 + seed) % 3 == 0 for i in range(count)], dtype = dt)
    if dt in FLOATS:
        return array.from_list([((i * 7 + seed * 13) % 41 - 20) / 8.0 for i in range(count)], dtype = dt)
    return array.from_list([(i * 7919 + seed * 104729) % 251 - 100 for i in range(count)], dtype = dt)

def ring_kernel(o, c, ws, x, y):
    isz = x[0].nbytes // c.ic
    segb = slot_bytes(c.E, isz)
    h = o.allocate_domain(name = "ringk", workers = ws, window_size = ring_window(c.dirs, c.K, segb), task_only = True)
    vals = RING.values(op = OPS.index(c.op), rs_only = c.rs, directions = c.dirs, seg_elems = c.E, slots = c.K, slot_bytes = segb)
    o.submit_next_level_group(RING.fn, [TaskArgs(tensors = [(x[r], INPUT), (y[r], OUTPUT)],
        scalars = RING.scalars(h[wk].device_ctx, vals)) for r, wk in enumerate(ws)], workers = ws)
    h.release()

def fan_kernel(o, c, ws, x, y):
    isz = x[0].nbytes // c.ic
    segb = slot_bytes(c.E, isz)
    h = o.allocate_domain(name = "fank", workers = ws, window_size = fan_window(c.n, c.mode, c.K, segb), task_only = True)
    vals = FAN.values(mode = c.mode, root = c.root, seg_elems = c.E, slots = c.K, slot_bytes = segb)
    o.submit_next_level_group(FAN.fn, [TaskArgs(tensors = [(x[r], INPUT), (y[r], OUTPUT)],
        scalars = FAN.scalars(h[wk].device_ctx, vals)) for r, wk in enumerate(ws)], workers = ws)
    h.release()

def call(lib, o, c, x, y):
    ws = c.chips
    if c.fn == "barrier":
        lib.barrier(o, workers = ws)
    elif c.fn == "ringk":
        ring_kernel(o, c, ws, x, y)
    elif c.fn == "fank":
        fan_kernel(o, c, ws, x, y)
    elif c.fn == "broadcast":
        lib.broadcast(o, x, y, workers = ws, root = c.root, algo = "fan")
    elif c.fn in ("allgather", "all_to_all"):
        getattr(lib, c.fn)(o, x, y, workers = ws, algo = "fan")
    else:
        getattr(lib, c.fn)(o, x, y, workers = ws, op = c.op, algo = c.algo)

def main(ctx):
    w = Worker(level = 3, platform = "a2a3sim", device_ids = [0, 1, 2, 3], mode = ctx.argv[0])
    lib = collectives(w)
    w.init()
    cs = [struct(**c) for c in CASES]
    ts = [([host_tensor(data = data(c.dt, c.ic, c.seed + r)) for r in range(c.n)],
           [host_tensor(data = data(c.dt, c.oc, 999)) for r in range(c.n)]) for c in cs]
    for i, c in enumerate(cs):
        w.run(lambda o, a, cfg: call(lib, o, c, ts[i][0], ts[i][1]))
    for i, c in enumerate(cs):
        for r in range(c.n):
            print("%d %s %s n=%d %s %s r%d: %s" % (i, c.fn, c.algo, c.n, c.dt, c.op, r, ts[i][1][r].read().tobytes()))
    print("cases: %d" % len(cs))
    w.close()
`

// windowCases returns count random cases of windowScript, as a Starlark
// list of dicts, from seed.
func windowCases(seed int64, count int) string {
	rng := rand.New(rand.NewSource(seed))
	dts := []string{"FLOAT32", "FLOAT16", "BFLOAT16", "INT8", "INT32", "INT64", "UINT16", "BOOL"}
	algos := []string{"onephase", "twophase", "ring", "bidirectional_ring"}
	var b strings.Builder
	b.WriteString("CASES = [\n")
	for i := range count {
		n := 2 + rng.Intn(3)
		chips := rng.Perm(4)[:n]
		c := rng.Intn(300) + 1
		fn, algo, ic, oc := "allreduce", algos[rng.Intn(len(algos))], c, c
		dirs, rs, E, K := 1, 0, 1+rng.Intn(7), 2+rng.Intn(2)
		mode, root := rng.Intn(3), rng.Intn(n)
		switch i % 9 {
		case 3:
			fn, algo, ic = "reduce_scatter", "ring", n*c
		case 4:
			fn, algo = "ringk", "kernel"
			dirs = 1 + rng.Intn(2)
			if dirs == 1 && rng.Intn(2) == 0 {
				rs, ic = 1, n*c
			}
		case 5:
			fn, algo, oc = "allgather", "fan", n*c
		case 6:
			fn, algo = "broadcast", "fan"
		case 7:
			fn, algo, ic, oc = "all_to_all", "fan", n*c, n*c
		case 8:
			fn, algo, K = "fank", "kernel", 1+rng.Intn(3)
			switch mode {
			case 0:
				oc = n * c
			case 2:
				ic, oc = n*c, n*c
			}
		}
		if i%17 == 0 {
			fn, algo = "barrier", "-"
		}
		fmt.Fprintf(&b, "  dict(fn = %q, algo = %q, n = %d, chips = %s, dt = %s, op = %q, ic = %d, oc = %d, seed = %d, dirs = %d, rs = %d, E = %d, K = %d, mode = %d, root = %d),\n",
			fn, algo, n, strings.Join(strings.Fields(fmt.Sprint(chips)), ", "), dts[rng.Intn(len(dts))], []string{"sum", "max", "min"}[rng.Intn(3)], ic, oc, i, dirs, rs, E, K, mode, root)
	}
	b.WriteString("]\n")
	return b.String()
}

// TestWindowGoBodiesAreTheStarlarkOnes runs random window collectives
// (2-4 ranks, dtypes, ops, every window algorithm of allreduce, the
// ring's reduce-scatter, the barrier, the fan's allgather, broadcast and
// all_to_all, the ring and fan kernels with small segments and few slots)
// with the Go bodies and with the Starlark
// ones, and wants every output byte for byte the same, the Go bodies to
// have run every kernel of the first run and none of the second.
func TestWindowGoBodiesAreTheStarlarkOnes(t *testing.T) {
	defer nativeOn.Store(true)
	const seed, count = 28, 150
	files := map[string]string{"main.star": windowScript, "cases.star": windowCases(seed, count)}
	run := func(native bool) (string, int64, int64) {
		nativeOn.Store(native)
		before, calls := nativeWindows.Load(), fastCalls.Load()
		out, err := runScriptOn(t, "a2a3sim", 4, files, "thread")
		if err != nil {
			t.Fatalf("native=%v: %v\n%s", native, err, out)
		}
		return out, nativeWindows.Load() - before, fastCalls.Load() - calls
	}
	goOut, goRuns, goCalls := run(true)
	slOut, slRuns, slCalls := run(false)
	if goOut != slOut {
		t.Fatalf("seed %d: outputs differ:\n%s", seed, firstDiff(goOut, slOut))
	}
	if !strings.Contains(goOut, fmt.Sprintf("cases: %d", count)) || strings.Count(goOut, "\n") < 2*count {
		t.Fatalf("the script printed:\n%s", goOut)
	}
	kernels, calls := int64(0), int64(0)
	for _, line := range strings.Split(windowCases(seed, count), "\n") {
		if strings.Contains(line, "dict(") {
			var n int
			fmt.Sscanf(line[strings.Index(line, ", n = ")+6:], "%d", &n)
			kernels += int64(n)
		}
		for _, fn := range []string{"allreduce", "reduce_scatter", "allgather", "broadcast", "all_to_all", "barrier"} {
			if strings.Contains(line, `fn = "`+fn+`"`) {
				calls++
			}
		}
	}
	if goRuns != kernels || slRuns != 0 {
		t.Errorf("the Go bodies ran %d kernels (want %d) and %d with them off", goRuns, kernels, slRuns)
	}
	if goCalls != calls || slCalls != 0 {
		t.Errorf("the Go submit took %d calls (want the %d library calls) and %d with it off", goCalls, calls, slCalls)
	}
}

// TestWindowGoSubmitIsTheStarlarkOne: the Go submit path gives each
// rank's kernel the task the library's launch gives it: the same kernel,
// the same scalars after device_ctx, a window of the same size. Both runs
// use the Go kernel bodies, wrapped to record what they receive.
func TestWindowGoSubmitIsTheStarlarkOne(t *testing.T) {
	defer func() { windowSubmit.Store(true) }()
	files := map[string]string{"main.star": windowScript, "cases.star": windowCases(29, 60)}
	run := func(submit bool) []string {
		windowSubmit.Store(submit)
		got := recordWindowTasks(t, func() {
			if out, err := runScriptOn(t, "a2a3sim", 4, files, "thread"); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
		return got
	}
	goTasks, slTasks := run(true), run(false)
	if len(goTasks) < 100 || strings.Join(goTasks, "\n") != strings.Join(slTasks, "\n") {
		t.Fatalf("%d tasks with the Go submit, %d without; first difference:\n%s", len(goTasks), len(slTasks),
			firstDiff(strings.Join(goTasks, "\n"), strings.Join(slTasks, "\n")))
	}
}

// recordWindowTasks runs fn with every window kernel's Go body wrapped to
// record its task (kernel, rank, size, scalars after device_ctx, window
// size) and returns the records sorted (a group's members start in any
// order; the domain names in them keep the calls apart).
func recordWindowTasks(t *testing.T, fn func()) []string {
	var mu sync.Mutex
	var got []string
	saved := maps.Clone(windowKernels)
	defer func() { maps.Copy(windowKernels, saved) }()
	for name, body := range saved {
		windowKernels[name] = func(th *starlark.Thread, chip *Chip, args *engine.TaskArgs) (bool, error) {
			line := name + " (no domain)"
			if c, ok := openWindow(chip, args.Scalars[0]); ok {
				line = fmt.Sprintf("%s %q rank %d of %d, scalars %v, window %d", name, c.v.Name(), c.v.Rank(), c.v.Size(), args.Scalars[1:], c.v.WindowSize())
			}
			mu.Lock()
			got = append(got, line)
			mu.Unlock()
			return body(th, chip, args)
		}
	}
	fn()
	slices.Sort(got)
	return got
}

// raceScript runs every window algorithm of the library once, over 3
// ranks, then reads the outputs on the main thread.
const raceScript = `
load("@simpler//collectives.star", "collectives")

def main(ctx):
    w = Worker(level = 3, platform = "a2a3sim", device_ids = [0, 1, 2], mode = "thread")
    lib = collectives(w)
    w.init()
    for algo in ["onephase", "twophase", "ring", "bidirectional_ring"]:
        x = [host_tensor(data = array.full(1000, float(r + 1), FLOAT32)) for r in range(3)]
        y = [host_tensor(shape = [1000], dtype = FLOAT32) for r in range(3)]
        w.run(lambda o, a, cfg: lib.allreduce(o, x, y, algo = algo))
        assert.eq(y[2].read().tolist()[999], 6.0)
    x = [host_tensor(data = array.full(999, float(r + 1), FLOAT32)) for r in range(3)]
    y = [host_tensor(shape = [333], dtype = FLOAT32) for r in range(3)]
    w.run(lambda o, a, cfg: lib.reduce_scatter(o, x, y, algo = "ring"))
    w.run(lambda o, a, cfg: lib.barrier(o))
    assert.eq(y[0].read().tolist()[0], 6.0)
    z = [host_tensor(shape = [999], dtype = FLOAT32) for r in range(3)]
    w.run(lambda o, a, cfg: lib.allgather(o, [t.view(shape = [333]) for t in x], z, algo = "fan"))
    w.run(lambda o, a, cfg: lib.broadcast(o, x, z, root = 1, algo = "fan"))
    w.run(lambda o, a, cfg: lib.all_to_all(o, x, z, algo = "fan"))
    assert.eq(z[0].read().tolist()[998], 3.0)
    print("done")
    w.close()
`

// runRaced runs raceScript under the race detector with the Go bodies on
// and returns its output, the detector's race count, how many kernels
// the Go bodies ran and the script's error.
func runRaced(t *testing.T) (string, int, int64, error) {
	t.Helper()
	nativeOn.Store(true)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.star"), []byte(raceScript), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	s := NewSession("a2a3sim", []int{0, 1, 2}, "thread", nil, &out, &out)
	s.Race = race.New(&out)
	before := nativeWindows.Load()
	err := s.RunFile(filepath.Join(dir, "main.star"))
	if cerr := s.Close(); cerr != nil {
		t.Errorf("session close: %v", cerr)
	}
	return out.String(), s.Race.Races(), nativeWindows.Load() - before, err
}

// TestWindowGoBodiesUnderRace: under --race the Go bodies run (every
// kernel of raceScript: 4 allreduces, a reduce-scatter, a barrier, an
// allgather, a broadcast and an all_to_all over 3 ranks) and the detector finds nothing in them, which it could
// only if it saw their notifies, waits and barriers order their window
// accesses.
func TestWindowGoBodiesUnderRace(t *testing.T) {
	out, races, runs, err := runRaced(t)
	if err != nil || races != 0 || strings.Contains(out, "DATA RACE") || !strings.Contains(out, "done") {
		t.Fatalf("%v, %d races:\n%s", err, races, out)
	}
	if runs != 9*3 {
		t.Errorf("the Go bodies ran %d kernels, want %d", runs, 9*3)
	}
}

// TestWindowGoBodyRaceIsReported: a Go body that reads the peers'
// windows without the barrier that orders it after their stores (a
// broken onephase) is reported, in the kernel's name: the detector sees
// the Go bodies' window accesses.
func TestWindowGoBodyRaceIsReported(t *testing.T) {
	defer func() { windowKernels["_k_onephase"] = runOnephase }()
	windowKernels["_k_onephase"] = onephaseNoBarrier
	out, races, _, _ := runRaced(t) // its sums may be wrong: it races
	if races == 0 || !strings.Contains(out, "WARNING: DATA RACE") || !strings.Contains(out, "_k_onephase") {
		t.Fatalf("%d races:\n%s", races, out)
	}
}

// onephaseNoBarrier is runOnephase without its barrier: it reads every
// window while the peers may still be staging theirs.
func onephaseNoBarrier(th *starlark.Thread, chip *Chip, args *engine.TaskArgs) (bool, error) {
	k, op, ok := readStage(th, chip, args)
	if !ok {
		return false, nil
	}
	k.start()
	if err := k.copy(k.window(k.r, k.L, 0, k.dt), k.src); err != nil {
		return true, err
	}
	wins := make([]*Tensor, k.n)
	for j := range wins {
		wins[j] = k.window(j, k.L, 0, k.dt)
	}
	return true, k.reduce(op, []*Tensor{k.dst}, wins)
}

// windowCallScript runs argv[0] calls of an allreduce of argv[3] FLOAT32
// elements through algorithm argv[2] over argv[1] ranks, each in a run of
// its own, and prints the median call.
const windowCallScript = `
load("@simpler//collectives.star", "collectives")

def main(ctx):
    calls, n, algo, L = int(ctx.argv[0]), int(ctx.argv[1]), ctx.argv[2], int(ctx.argv[3])
    w = Worker(level = 3, platform = "a2a3sim", device_ids = list(range(n)), mode = "thread")
    c = collectives(w)
    w.init()
    x = [host_tensor(data = array.full(L, float(r + 1), FLOAT32)) for r in range(n)]
    y = [host_tensor(shape = [L], dtype = FLOAT32) for r in range(n)]
    fn = lambda o, a, cfg: c.allreduce(o, x, y, algo = algo)
    w.run(fn)
    ts = []
    for _ in range(calls):
        t0 = time.now()
        w.run(fn)
        ts.append((time.now() - t0).nanoseconds)
    assert.eq(y[n - 1].view(shape = [2]).read().tolist(), [n * (n + 1) / 2.0] * 2)
    print("median_ns", sorted(ts)[len(ts) // 2])
    w.close()
`

// BenchmarkWindowAllreduce times 4 KiB and 64 MiB allreduce calls
// through each window algorithm from a script, 2 and 4 ranks, with the Go
// bodies. For a profile:
//
//	go test -run XXX -bench 'WindowAllreduce/4KiB/onephase/2' -benchtime 20000x -cpuprofile cpu.out ./starlib/
func BenchmarkWindowAllreduce(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 20} {
		for _, algo := range []string{"onephase", "twophase", "ring", "bidirectional_ring"} {
			for _, n := range []int{2, 4} {
				b.Run(fmt.Sprintf("%s/%s/%d", sizeLabel(size), algo, n), func(b *testing.B) {
					benchWindowCall(b, algo, n, size/4)
				})
			}
		}
	}
}

func sizeLabel(size int) string {
	if size >= 1<<20 {
		return fmt.Sprintf("%dMiB", size>>20)
	}
	return fmt.Sprintf("%dKiB", size>>10)
}

// benchWindowCall runs windowCallScript for b.N calls and reports their
// median.
func benchWindowCall(b *testing.B, algo string, n, elems int) {
	benchScriptMedian(b, windowCallScript, fmt.Sprint(b.N), fmt.Sprint(n), algo, fmt.Sprint(elems))
}

// benchScriptMedian runs script on four chips with argv and reports the
// median it prints ("median_ns N") in microseconds per call.
func benchScriptMedian(b *testing.B, script string, argv ...string) {
	var out bytes.Buffer
	s := NewSession("a2a3sim", []int{0, 1, 2, 3}, "thread", argv, &out, &out)
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.star"), []byte(script), 0o644); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	err := s.RunFile(filepath.Join(dir, "main.star"))
	b.StopTimer()
	if cerr := s.Close(); cerr != nil || err != nil {
		b.Fatalf("%v %v\n%s", err, cerr, out.String())
	}
	var med float64
	i := strings.Index(out.String(), "median_ns")
	if i < 0 {
		b.Fatalf("no median in the output:\n%s", out.String())
	}
	if _, err := fmt.Sscanf(out.String()[i:], "median_ns %g", &med); err != nil {
		b.Fatal(err, out.String())
	}
	b.ReportMetric(med/1e3, "median-µs/call")
}

// TestWindowGoBodiesYieldAtTheSamePoints: under a schedule (--seed) the
// Go bodies reach the scheduling points the Starlark bodies reach, as
// many of each kind (every tensor access, notify, member start and end):
// only the interpreter's step points ("steps") and the blocking of waits
// (which depends on the interleaving) may differ.
func TestWindowGoBodiesYieldAtTheSamePoints(t *testing.T) {
	defer nativeOn.Store(true)
	points := func(native bool) map[string]int {
		nativeOn.Store(native)
		seen := map[string]int{}
		var mu sync.Mutex
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "main.star"), []byte(raceScript), 0o644); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		s := NewSession("a2a3sim", []int{0, 1, 2}, "thread", nil, &out, &out)
		err := s.Schedule(Schedule{Seed: 5, Trace: func(d dsched.Decision) {
			if d.Point != "steps" && d.Point != "block" {
				mu.Lock()
				seen[d.Point]++
				mu.Unlock()
			}
		}})
		if err == nil {
			err = s.RunFile(filepath.Join(dir, "main.star"))
		}
		if cerr := s.Close(); cerr != nil {
			t.Errorf("session close: %v", cerr)
		}
		if err != nil || !strings.Contains(out.String(), "done") {
			t.Fatalf("native=%v: %v\n%s", native, err, out.String())
		}
		return seen
	}
	goPoints, slPoints := points(true), points(false)
	if !maps.Equal(goPoints, slPoints) || goPoints["comm.notify"] == 0 || goPoints["comm.reduce_into"] == 0 {
		t.Fatalf("scheduling points differ:\nGo:       %v\nStarlark: %v", goPoints, slPoints)
	}
}
