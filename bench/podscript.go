package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The pod through the library: what a user's script gets. A .star file,
// run by `simpler run` in a process of its own (this binary), builds a
// level-4 worker over local level-3 nodes of 16 chips (thread mode) and
// runs global_collectives(w).allreduce(..., algo = "ring") over every
// chip, 4 KiB per rank: the library allocates the global domain, submits
// one group task over the nodes, and releases the domain at the run's
// fence. The script times each w.run and checks the sums; the process's
// peak resident set is the memory figure. The first run allocates the
// domain with the full transaction, the later ones reuse it warm.

// podScriptSrc is the script; its arguments are the node count and how
// many runs to time. It prints "run NS" per run.
const podScriptSrc = `
load("@simpler//collectives.star", "global_collectives")

CHIPS = 16
COUNT = 1024  # float32 per rank: 4 KiB

def main(ctx):
    nodes, runs = int(ctx.argv[0]), int(ctx.argv[1])
    w = Worker(level = 4, platform = "a2a3sim")
    for i in range(nodes):
        w.add_worker(Worker(level = 3, platform = "a2a3sim", device_ids = list(range(CHIPS))))
    g = global_collectives(w)
    w.init()
    n = nodes * CHIPS
    ranks = [(r // CHIPS, r % CHIPS) for r in range(n)]
    ins = [host_tensor(data = array.arange(COUNT, FLOAT32) + 1.0 * r) for r in range(n)]
    outs = [host_tensor(shape = [COUNT]) for r in range(n)]

    def orch(o, args, cfg):
        g.allreduce(o, ins, outs, workers = ranks, algo = "ring")

    want = array.arange(COUNT, FLOAT32) * (1.0 * n) + n * (n - 1) / 2.0
    for i in range(runs):
        for r in [0, n - 1]:
            outs[r].write(array.zeros(COUNT, FLOAT32))
        start = time.now()
        w.run(orch)
        print("run", (time.now() - start).nanoseconds)
        for r in [0, n - 1]:
            assert.allclose(outs[r].read(), want)
    w.close()
`

// podScriptRuns is how many runs each size times: the first (cold), then
// warm ones whose median is the figure.
const podScriptRuns = 4

// podScript is one size's figures from the script.
type podScript struct {
	cold, warm time.Duration // the first run; the median of the others
	peakRSS    int64         // the script process's, bytes
	wall       time.Duration // the whole `simpler run`, start-up included
	cpu        time.Duration // its user + system time: beside wall, how much of it the machine's load took
}

// measurePodScript runs the script over nodes level-3 nodes in a process
// of its own and reads its figures.
func measurePodScript(nodes int) (podScript, error) {
	var p podScript
	exe, err := os.Executable()
	if err != nil {
		return p, err
	}
	dir, err := os.MkdirTemp("", "simpler-bench-")
	if err != nil {
		return p, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "pod.star")
	if err := os.WriteFile(path, []byte(podScriptSrc), 0o600); err != nil {
		return p, err
	}
	var out bytes.Buffer
	cmd := exec.Command(exe, "run", "--no-tag-output", path, fmt.Sprint(nodes), fmt.Sprint(podScriptRuns))
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	p.peakRSS, err = RunPeakRSS(cmd)
	p.wall = time.Since(start)
	if err != nil {
		return p, fmt.Errorf("pod script over %d nodes: %v\n%s", nodes, err, out.String())
	}
	p.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	runs, err := parseRuns(out.String())
	if err != nil {
		return p, fmt.Errorf("pod script over %d nodes: %v", nodes, err)
	}
	p.cold, p.warm = runs[0], mid(runs[1:])
	return p, nil
}

// parseRuns reads the script's "run NS" lines; there must be
// podScriptRuns of them.
func parseRuns(out string) ([]time.Duration, error) {
	var runs []time.Duration
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ns int64
		if _, err := fmt.Sscanf(line, "run %d", &ns); err == nil {
			runs = append(runs, time.Duration(ns))
		}
	}
	if len(runs) != podScriptRuns {
		return nil, fmt.Errorf("printed %d runs, want %d:\n%s", len(runs), podScriptRuns, out)
	}
	return runs, nil
}
