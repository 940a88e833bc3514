package main

import (
	"bytes"
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
// fan's allgather, broadcast and all_to_all, over 2-4 ranks, a few dtypes and every op, at odd sizes, and prints every
// output whole.
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
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.star": windowAlgoScript})
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
