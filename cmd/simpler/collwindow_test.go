package main

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The window kernels of collectives.star have Go bodies (starlib's
// collwindow.go) that run in the chip processes too. These tests run them
// through this binary as a user does: in process mode against the
// Starlark bodies (SIMPLER_NATIVE=off), under --race, and under --seed
// with --check-replay.

// windowAlgoScript runs allreduce through each window algorithm named in
// argv (all of them without), a ring reduce-scatter, a barrier and the
// fan's allgather, broadcast and all_to_all, over 2-4 ranks, a few dtypes
// and every op, at odd sizes, and prints every output whole.
const windowAlgoScript = `
load("@simpler//collectives.star", "collectives")

ALGOS = ["onephase", "twophase", "ring", "bidirectional_ring"]

def data(dt, count, seed):
    return array.from_list([((i * 7 + seed * 13) % 41 - 20) / (8.0 if dt == FLOAT32 else 1) for i in range(count)], dtype = dt)

def main(ctx):
    algos = ctx.argv or ALGOS
    w = Worker(level = 3, platform = "a2a3sim", device_ids = [0, 1, 2, 3], mode = ctx.mode)
    lib = collectives(w)
    w.init()
    k = 0
    for algo in algos:
        for n in [2, 3, 4]:
            for dt, op in [(FLOAT32, "sum"), (INT8, "max"), (BFLOAT16 if n != 3 else INT32, "min")]:
                k += 1
                count = [5, 129, 1000][k % 3]
                ws = [(r * 3 + k) % 4 for r in range(n)]
                x = [host_tensor(data = data(dt, count, k + r)) for r in range(n)]
                y = [host_tensor(data = data(dt, count, 99)) for r in range(n)]
                w.run(lambda o, a, cfg: lib.allreduce(o, x, y, workers = ws, op = op, algo = algo))
                for r in range(n):
                    print(algo, n, dt, op, r, y[r].read().tolist())
    x = [host_tensor(data = data(FLOAT32, 30, r)) for r in range(3)]
    y = [host_tensor(shape = [10], dtype = FLOAT32) for r in range(3)]
    w.run(lambda o, a, cfg: lib.reduce_scatter(o, x, y, workers = [2, 0, 1], algo = "ring"))
    w.run(lambda o, a, cfg: lib.barrier(o))
    for r in range(3):
        print("reduce_scatter", r, y[r].read().tolist())
    z = [host_tensor(shape = [30], dtype = FLOAT32) for r in range(3)]
    w.run(lambda o, a, cfg: lib.allgather(o, y, z, workers = [1, 2, 0], algo = "fan"))
    for r in range(3):
        print("allgather", r, z[r].read().tolist())
    w.run(lambda o, a, cfg: lib.broadcast(o, x, z, workers = [1, 2, 0], root = 2, algo = "fan"))
    for r in range(3):
        print("broadcast", r, z[r].read().tolist())
    w.run(lambda o, a, cfg: lib.all_to_all(o, x, z, workers = [1, 2, 0], algo = "fan"))
    for r in range(3):
        print("all_to_all", r, z[r].read().tolist())
    w.close()
`

// runWindowScript runs windowAlgoScript with args and extra environment
// and returns its exit status, stdout and stderr.
func runWindowScript(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	return runWindowFiles(t, map[string]string{"main.star": windowAlgoScript}, env, args...)
}

// runWindowFiles runs `simpler run args...` in a directory holding files.
func runWindowFiles(t *testing.T, files map[string]string, env []string, args ...string) (int, string, string) {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, files)
	cmd := exec.Command(os.Args[0], append([]string{"run"}, args...)...)
	cmd.Dir = dir
	cmd.Env = cliEnv(append([]string{"NO_COLOR=1"}, env...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("simpler %v: %v", args, err)
	}
	checkNoShm(t, cmd.Env)
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// TestWindowGoBodiesInProcessMode: in process mode (the kernels in chip
// processes) the Go bodies write what the Starlark ones write, byte for
// byte.
func TestWindowGoBodiesInProcessMode(t *testing.T) {
	args := []string{"--mode", "process", "--devices", "0-3", "main.star"}
	code, goOut, stderr := runWindowScript(t, nil, args...)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	code, slOut, stderr := runWindowScript(t, []string{"SIMPLER_NATIVE=off"}, args...)
	if code != 0 {
		t.Fatalf("SIMPLER_NATIVE=off: exit %d:\n%s", code, stderr)
	}
	if goOut != slOut {
		t.Fatalf("outputs differ:\nGo:\n%s\nStarlark:\n%s", goOut, slOut)
	}
	if n := strings.Count(goOut, "\n"); n != 4*3*(2+3+4)+4*3 {
		t.Fatalf("printed %d lines:\n%s", n, goOut)
	}
}

// TestWindowGoBodiesRaceFree: `simpler run --race` of every window
// algorithm reports nothing in thread and in process mode.
func TestWindowGoBodiesRaceFree(t *testing.T) {
	for _, mode := range []string{"thread", "process"} {
		code, out, stderr := runWindowScript(t, nil, "--race", "--mode", mode, "--devices", "0-3", "main.star")
		if code != 0 || strings.Contains(stderr, "WARNING") || !strings.Contains(out, "all_to_all 2") {
			t.Errorf("%s mode: exit %d:\n%s", mode, code, stderr)
		}
	}
}

// TestWindowGoBodiesReplay: under --seed each window algorithm replays
// exactly (the schedule and the output), with the Go bodies yielding at
// their accesses, notifies and waits.
func TestWindowGoBodiesReplay(t *testing.T) {
	for _, algo := range []string{"onephase", "twophase", "ring", "bidirectional_ring"} {
		code, _, stderr := runWindowScript(t, nil, "--seed", "7", "--check-replay", "--devices", "0-3", "main.star", algo)
		if code != 0 || !strings.Contains(stderr, "simpler run --check-replay: seed 7 replayed exactly (schedule ") {
			t.Errorf("%s: exit %d:\n%s", algo, code, stderr)
		}
	}
}

// randomWindowScript runs the cases of cases.star (randomWindowCases):
// each a library call of a window algorithm, named, over host tensors of
// a random dtype and size on random chips, and prints the outputs.
const randomWindowScript = `
load("@simpler//collectives.star", "collectives")
load("cases.star", "CASES")

def data(dt, count, seed):
    if dt == FLOAT32:
        return array.from_list([((i * 7 + seed * 13) % 41 - 20) / 8.0 for i in range(count)], dtype = dt)
    return array.from_list([(i * 31 + seed * 17) % 97 - 48 for i in range(count)], dtype = dt)

def call(lib, o, c, x, y):
    if c.fn == "barrier":
        lib.barrier(o, workers = c.chips)
    elif c.fn == "broadcast":
        lib.broadcast(o, x, y, workers = c.chips, root = c.root, algo = c.algo)
    elif c.fn in ("allgather", "all_to_all"):
        getattr(lib, c.fn)(o, x, y, workers = c.chips, algo = c.algo)
    else:
        getattr(lib, c.fn)(o, x, y, workers = c.chips, op = c.op, algo = c.algo)

def main(ctx):
    w = Worker(level = 3, platform = "a2a3sim", device_ids = [0, 1, 2, 3], mode = ctx.mode)
    lib = collectives(w)
    w.init()
    for i, d in enumerate(CASES):
        c = struct(**d)
        x = [host_tensor(data = data(c.dt, c.ic, i + r)) for r in range(c.n)]
        y = [host_tensor(data = data(c.dt, c.oc, 99)) for r in range(c.n)]
        w.run(lambda o, a, cfg: call(lib, o, c, x, y))
        for r in range(c.n):
            print(i, c.fn, c.algo, c.n, c.dt, c.op, r, y[r].read().tolist())
    w.close()
`

// randomWindowCases is cases.star for randomWindowScript: count random
// calls from seed.
func randomWindowCases(seed int64, count int) string {
	rng := rand.New(rand.NewSource(seed))
	calls := [][2]string{{"allreduce", "onephase"}, {"allreduce", "twophase"}, {"allreduce", "ring"}, {"allreduce", "bidirectional_ring"},
		{"reduce_scatter", "ring"}, {"allgather", "fan"}, {"broadcast", "fan"}, {"all_to_all", "fan"}, {"barrier", "auto"}}
	var b strings.Builder
	b.WriteString("CASES = [\n")
	for range count {
		call := calls[rng.Intn(len(calls))]
		n := 2 + rng.Intn(3)
		c := 1 + rng.Intn(200)
		ic, oc := c, c
		switch call[0] {
		case "reduce_scatter":
			ic = n * c
		case "allgather":
			oc = n * c
		case "all_to_all":
			ic, oc = n*c, n*c
		}
		chips := strings.Join(strings.Fields(fmt.Sprint(rng.Perm(4)[:n])), ", ")
		fmt.Fprintf(&b, "  dict(fn = %q, algo = %q, n = %d, chips = %s, dt = %s, op = %q, root = %d, ic = %d, oc = %d),\n",
			call[0], call[1], n, chips, []string{"FLOAT32", "INT16", "INT8"}[rng.Intn(3)], []string{"sum", "max", "min"}[rng.Intn(3)], rng.Intn(n), ic, oc)
	}
	b.WriteString("]\n")
	return b.String()
}

// TestWindowGoBodiesRandomProcessMode: random calls of every window
// algorithm in process mode write the same bytes with the Go bodies (and
// the Go submit) as with the Starlark code alone (SIMPLER_NATIVE=off).
func TestWindowGoBodiesRandomProcessMode(t *testing.T) {
	const seed, count = 2812, 40
	files := map[string]string{"main.star": randomWindowScript, "cases.star": randomWindowCases(seed, count)}
	args := []string{"--mode", "process", "--devices", "0-3", "main.star"}
	code, goOut, stderr := runWindowFiles(t, files, nil, args...)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	code, slOut, stderr := runWindowFiles(t, files, []string{"SIMPLER_NATIVE=off"}, args...)
	if code != 0 {
		t.Fatalf("SIMPLER_NATIVE=off: exit %d:\n%s", code, stderr)
	}
	if goOut != slOut {
		t.Fatalf("seed %d: outputs differ:\nGo:\n%s\nStarlark:\n%s", seed, goOut, slOut)
	}
	if !strings.HasPrefix(goOut, "0 ") || !strings.Contains(goOut, fmt.Sprintf("\n%d ", count-1)) {
		t.Fatalf("the script printed:\n%s", goOut)
	}
}
