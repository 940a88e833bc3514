package starlib

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// collfastScript runs every direct collective, through the library and
// as the kernel alone with parts > 1, over 2..16 ranks (on chips not in
// rank order), every dtype of the platform (at 2 and 5 ranks; two of
// them at the others), every op, odd sizes, and prints every output whole (large ones as a hash of their elements).
// Outputs start as a pattern, so that an element a path fails to write
// shows. Values are not integers for the float kinds: rounding must
// match too.
const collfastScript = `
load("@simpler//collectives.star", "collectives")
load("@simpler//collective_kernels.star", "DIRECT", "DIRECT_MODES")

COMMON = [FLOAT32, FLOAT16, BFLOAT16, INT8, INT16, INT32, INT64, UINT8, UINT16, UINT32, UINT64, BOOL]
NARROW = [FLOAT8_E4M3, FLOAT8_E5M2, FLOAT4_E2M1]
FLOATS = [FLOAT32, FLOAT16, BFLOAT16] + NARROW
FNS = ["allreduce", "reduce_scatter", "allgather", "broadcast", "all_to_all"]

def chips(n):
    return [(5 * r + 3) % 16 for r in range(n)]

def data(dt, count, seed):
    if dt == BOOL:
        return array.from_list([(i * 7 + seed) % 3 == 0 for i in range(count)], dtype = dt)
    if dt in FLOATS:
        return array.from_list([((i * 7 + seed * 13) % 41 - 20) / 8.0 for i in range(count)], dtype = dt)
    return array.from_list([(i * 7919 + seed * 104729) % 251 - 100 for i in range(count)], dtype = dt)

def counts(fn, n, k):
    # (input, output) element counts: odd, some below n
    c = [1, 7, 37, 129][k % 4]
    if fn == "reduce_scatter":
        return n * c, c
    if fn == "allgather":
        return c, n * c
    if fn == "all_to_all":
        return n * c, n * c
    return c, c

def cases(platform):
    out = []
    k = 0
    every = COMMON + (NARROW if platform.startswith("a5") else [])
    for n in [2, 3, 5, 8, 16]:
        # Every dtype at 2 and 5 ranks; two of them, rotating, at the
        # others (the race detector makes each case costly).
        dts = every if n in (2, 5) else [every[n % len(every)], every[(n + 5) % len(every)]]
        for dt in dts:
            for fn in FNS:
                for op in (["sum", "max", "min"] if fn in ("allreduce", "reduce_scatter") else ["sum"]):
                    k += 1
                    ic, oc = counts(fn, n, k)
                    out.append(struct(fn = fn, n = n, dt = dt, op = op, root = k % n, ic = ic, oc = oc, parts = 1 + k % min(n, 4), seed = k))
    return out

def call(lib, o, c, x, y):
    ws = chips(c.n)
    if c.fn in ("allreduce", "reduce_scatter"):
        getattr(lib, c.fn)(o, x, y, workers = ws, op = c.op, algo = "direct")
    elif c.fn == "broadcast":
        lib.broadcast(o, x, y, workers = ws, root = c.root)
    else:
        getattr(lib, c.fn)(o, x, y, workers = ws)

def kernel(o, c, x, y):
    # the kernel alone, its work shared by c.parts members
    ts = [(t, INPUT) for t in x] + [(t, OUTPUT) for t in y]
    ops = ["sum", "max", "min"]
    members = [TaskArgs(tensors = ts, scalars = DIRECT.scalars(0, DIRECT.values(
        mode = DIRECT_MODES.index(c.fn), op = ops.index(c.op), root = c.root, part = p, parts = c.parts))) for p in range(c.parts)]
    o.submit_next_level_group(DIRECT.fn, members, workers = chips(c.n)[:c.parts])

def tensors(c):
    x = [host_tensor(data = data(c.dt, c.ic, c.seed + r)) for r in range(c.n)]
    y = [host_tensor(data = data(c.dt, c.oc, 999)) for r in range(c.n)]
    return x, y

def big_tensors(c):
    # built whole, not element by element: a million elements each
    x = [host_tensor(data = array.arange(c.ic, FLOAT32) * (0.25 + r) - 1000) for r in range(c.n)]
    y = [host_tensor(data = array.arange(c.oc, FLOAT32) * -1) for r in range(c.n)]
    return x, y

def main(ctx):
    w = Worker(level = 3, platform = ctx.platform, device_ids = list(range(16)), mode = "thread")
    lib = collectives(w)
    w.init()
    cs = cases(ctx.platform)
    viaLib = [tensors(c) for c in cs]
    viaKernel = [tensors(c) for c in cs]
    big = [struct(fn = fn, n = 4, dt = FLOAT32, op = "sum", root = 1, ic = ic, oc = oc, parts = 4, seed = 7)
           for fn, ic, oc in [("allreduce", 524291, 524291), ("reduce_scatter", 4 * 262147, 262147), ("broadcast", 1048579, 1048579)]]
    viaBig = [big_tensors(c) for c in big]

    def orch(o, args, cfg):
        for i, c in enumerate(cs):
            call(lib, o, c, viaLib[i][0], viaLib[i][1])
            kernel(o, c, viaKernel[i][0], viaKernel[i][1])
        for i, c in enumerate(big):
            call(lib, o, c, viaBig[i][0], viaBig[i][1])

    w.run(orch)
    for i, c in enumerate(cs):
        for r in range(c.n):
            print("%s n=%d %s %s r%d: %s | %s" % (c.fn, c.n, c.dt, c.op, r, viaLib[i][1][r].read().tobytes(), viaKernel[i][1][r].read().tobytes()))
    for i, c in enumerate(big):
        for r in range(c.n):
            print("big %s r%d: %d" % (c.fn, r, hash(viaBig[i][1][r].read().tobytes())))
    print("calls: %d" % (len(cs) + len(big)))
    w.close()
`

// TestDirectGoPathIsTheStarlarkOne runs collfastScript with the Go paths
// (the library's checks and packing, the direct kernel) and then with
// the Starlark code alone, and wants every output byte for byte the
// same, and the Go paths to have taken every call of the first run and
// none of the second.
func TestDirectGoPathIsTheStarlarkOne(t *testing.T) {
	for _, platform := range []string{"a2a3sim", "a5sim"} {
		t.Run(platform, func(t *testing.T) {
			defer nativeOn.Store(true)
			goOut, goFast, goKernels := runCollfast(t, platform, true)
			slOut, slFast, slKernels := runCollfast(t, platform, false)
			if goOut != slOut {
				t.Fatalf("outputs differ:\n%s", firstDiff(goOut, slOut))
			}
			calls := strings.Count(goOut, "\n") // sanity: the script printed its results
			if calls < 100 || !strings.Contains(goOut, "calls: ") {
				t.Fatalf("script printed %d lines:\n%s", calls, goOut)
			}
			var n int64
			if _, err := fmt.Sscan(goOut[strings.LastIndex(goOut, "calls: ")+len("calls: "):], &n); err != nil {
				t.Fatal(err)
			}
			if goFast != n || goKernels < 2*n {
				t.Errorf("Go paths took %d of %d calls and ran %d kernels (want at least %d)", goFast, n, goKernels, 2*n)
			}
			if slFast != 0 || slKernels != 0 {
				t.Errorf("with the Go paths off they still took %d calls and %d kernels", slFast, slKernels)
			}
		})
	}
}

func runCollfast(t *testing.T, platform string, native bool) (string, int64, int64) {
	t.Helper()
	nativeOn.Store(native)
	fast0, kern0 := fastCalls.Load(), nativeKernels.Load()
	out, err := runScriptOn(t, platform, 16, map[string]string{"main.star": collfastScript})
	if err != nil {
		t.Fatalf("native=%v: %v\n%s", native, err, out)
	}
	return out, fastCalls.Load() - fast0, nativeKernels.Load() - kern0
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return "Go:       " + clip(al[i]) + "\nStarlark: " + clip(bl[i])
		}
	}
	return "(one output is longer)"
}

func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// runScriptOn is runScript on a session of chips simulated chips of
// platform, with argv.
func runScriptOn(t *testing.T, platform string, chips int, files map[string]string, argv ...string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ids := make([]int, chips)
	for i := range ids {
		ids[i] = i
	}
	var out bytes.Buffer
	s := NewSession(platform, ids, "thread", argv, &out, &out)
	err := s.RunFile(filepath.Join(dir, "main.star"))
	if cerr := s.Close(); cerr != nil {
		t.Errorf("session close: %v", cerr)
	}
	return out.String(), err
}

// smallCallScript runs argv[0] calls of a 4 KiB allreduce ("auto") over
// argv[1] ranks, each in a run of its own, as bench/collectives.go times
// them; it prints the median call.
const smallCallScript = `
load("@simpler//collectives.star", "collectives")

def main(ctx):
    calls, n = int(ctx.argv[0]), int(ctx.argv[1])
    w = Worker(level = 3, platform = "a2a3sim", device_ids = list(range(n)), mode = "thread")
    c = collectives(w)
    w.init()
    x = [host_tensor(data = array.full(1024, float(r + 1), FLOAT32)) for r in range(n)]
    y = [host_tensor(shape = [1024], dtype = FLOAT32) for r in range(n)]
    fn = lambda o, a, cfg: c.allreduce(o, x, y)
    w.run(fn)
    ts = []
    for _ in range(calls):
        t0 = time.now()
        w.run(fn)
        ts.append((time.now() - t0).nanoseconds)
    assert.eq(y[n - 1].read().tolist()[:2], [n * (n + 1) / 2.0] * 2)
    print("median_ns", sorted(ts)[len(ts) // 2])
    w.close()
`

// BenchmarkSmallAllreduce times 4 KiB allreduce calls with the Go paths
// and with the Starlark code alone, 2 and 4 ranks. For a profile of
// 20 000 calls:
//
//	go test -run XXX -bench 'SmallAllreduce/go/4' -benchtime 20000x -cpuprofile cpu.out ./starlib/
func BenchmarkSmallAllreduce(b *testing.B) {
	for _, path := range []string{"go", "starlark"} {
		for _, n := range []int{2, 4} {
			b.Run(fmt.Sprintf("%s/%d", path, n), func(b *testing.B) {
				defer nativeOn.Store(true)
				nativeOn.Store(path == "go")
				benchScriptMedian(b, smallCallScript, fmt.Sprint(b.N), fmt.Sprint(n))
			})
		}
	}
}
