package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"simpler/engine"
	"simpler/engine/remote"
	"simpler/hal"
	"simpler/starlib"
)

// The worker-group benchmark: ranks that Open MPI's mpirun starts on this
// host and that dial in to their level-4 worker (add_worker_group). Its
// limits, measured in the same run, are mpirun starting as many ranks of
// /bin/true, and the same nodes dialled on a listening daemon.

// groupReps is how many start-ups each figure is the median of.
const groupReps = 7

// groupRanks are the group sizes whose start-up is measured.
var groupRanks = []int{2, 4}

// groupLauncherArgs let mpirun place more ranks than this host has cores.
var groupLauncherArgs = []string{"--oversubscribe"}

// mpiBound bounds one run of mpirun outside a worker group (the probe,
// the launcher-alone start-up).
const mpiBound = time.Minute

// mpirunConsent is what the bench adds to the environment of the mpirun
// it starts, and of nothing else: as root, Open MPI's two consents to
// running as root (what tests add, internal/mpitest.Env). The output
// says so; the CLI never sets them.
func mpirunConsent() []string {
	if os.Geteuid() != 0 {
		return nil
	}
	return []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"}
}

// Group prints a worker group's start-up — init() until every rank is up,
// and close() until mpirun has exited — for 2 and 4 ranks, beside mpirun
// alone and beside the same nodes dialled on a daemon; then a no-op task
// on a rank that dialled in beside one on a listening daemon's node. When
// mpirun is missing or does not run here the part says it was not
// measured, and why: that is not a failure.
func Group(w io.Writer) (bool, error) {
	env := mpirunConsent()
	fmt.Fprintf(w, "group: worker groups under mpirun on 127.0.0.1 (one-chip a2a3sim ranks, mpirun %s), medians of %d\n", strings.Join(groupLauncherArgs, " "), groupReps)
	if why := probeMPI(env); why != "" {
		fmt.Fprintf(w, "  not measured: %s\n", why)
		return true, nil
	}
	if len(env) > 0 {
		fmt.Fprintf(w, "  (running as root: the bench gives mpirun %s, in mpirun's environment only)\n", strings.Join(env, " "))
	}
	d, addr, err := startDaemon()
	if err != nil {
		return false, err
	}
	defer d.Close()
	for _, n := range groupRanks {
		if err := printStartup(w, n, env, addr); err != nil {
			return false, err
		}
	}
	rt, err := groupRoundTrip(addr, env)
	if err != nil {
		return false, err
	}
	return rt.print(w), nil
}

// probeMPI says why mpirun cannot start ranks here ("" when it can): it
// is not installed, or `mpirun -np 1 true` fails.
func probeMPI(env []string) string {
	if _, err := exec.LookPath("mpirun"); err != nil {
		return "mpirun (Open MPI) is not installed here (Debian and Ubuntu: apt-get install openmpi-bin)"
	}
	if out, err := runMPI(env, "-np", "1", "true"); err != nil {
		return fmt.Sprintf("mpirun -np 1 true failed here: %v%s", err, lastLines(out, 5))
	}
	return ""
}

// runMPI runs mpirun with args and env added, in a process group of its
// own that is killed if it outlives mpiBound, and returns its output.
func runMPI(env []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), mpiBound)
	defer cancel()
	c := exec.CommandContext(ctx, "mpirun", args...)
	c.Env = append(os.Environ(), env...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.WaitDelay = time.Second
	out, err := c.CombinedOutput()
	if ctx.Err() != nil {
		return out, fmt.Errorf("no end within %v; killed", mpiBound)
	}
	return out, err
}

// lastLines is the last n non-empty lines of out, indented.
func lastLines(out []byte, n int) string {
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 0 {
		return ""
	}
	return "\n    " + strings.Join(lines, "\n    ")
}

// printStartup measures and prints the start-up figures of a group of n
// ranks. mpirun alone is the group's own mpirun command line (its
// launcher_args, and --bind-to none as a group adds it) with true as the
// program.
func printStartup(w io.Writer, n int, env []string, addr string) error {
	alone := append(append([]string{"-np", strconv.Itoa(n)}, groupLauncherArgs...), "--bind-to", "none", "true")
	mpi, err := median(groupReps, func() error {
		out, err := runMPI(env, alone...)
		if err != nil {
			return fmt.Errorf("mpirun %s: %v%s", strings.Join(alone, " "), err, lastLines(out, 5))
		}
		return nil
	})
	if err != nil {
		return err
	}
	up, down, err := groupStartup(n, env)
	if err != nil {
		return err
	}
	dup, ddown, err := dialStartup(n, addr)
	if err != nil {
		return err
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fmt.Fprintf(w, "  %-34s %8.1f ms (mpirun %s)\n", fmt.Sprintf("mpirun alone, %d ranks", n), ms(mpi), strings.Join(alone, " "))
	fmt.Fprintf(w, "  %-34s %8.1f ms (listen, mpirun, every rank joined and up)\n", fmt.Sprintf("group init(), %d ranks", n), ms(up))
	fmt.Fprintf(w, "  %-34s %8.1f ms (the ranks' sessions ended, mpirun exited)\n", fmt.Sprintf("group close(), %d ranks", n), ms(down))
	fmt.Fprintf(w, "  %-34s %8.1f ms init, %.1f ms close (for scale: add_remote_worker x %d)\n", fmt.Sprintf("%d nodes on a listening daemon", n), ms(dup), ms(ddown), n)
	return nil
}

// groupStartup is the median time of init() of a level-4 worker with one
// group of n ranks under mpirun, and of its close().
func groupStartup(n int, env []string) (up, down time.Duration, err error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	start := remote.StartGroup(remote.StarterConfig{Rank: []string{exe, "remote-l3-worker"}, Env: env})
	spec := engine.GroupSpec{Ranks: n, Launcher: engine.LauncherMPI, Platform: "a2a3sim", DeviceIDs: []int{0},
		LauncherArgs: groupLauncherArgs, Listen: "127.0.0.1:0"}
	return timeInitClose(engine.Config{Dial: remote.Dial, StartGroup: start}, func(top *engine.Worker) error {
		_, err := top.AddWorkerGroup(spec)
		return err
	})
}

// dialStartup is the same for n nodes on the daemon at addr, dialled by
// add_remote_worker.
func dialStartup(n int, addr string) (up, down time.Duration, err error) {
	return timeInitClose(engine.Config{Dial: remote.Dial}, func(top *engine.Worker) error {
		for range n {
			if _, err := top.AddRemoteWorker(engine.RemoteSpec{Endpoint: addr, Platform: "a2a3sim", DeviceIDs: []int{0}}); err != nil {
				return err
			}
		}
		return nil
	})
}

// timeInitClose makes groupReps level-4 workers of cfg, each given its
// nodes by add, and returns the median time of their init() and of their
// close().
func timeInitClose(cfg engine.Config, add func(*engine.Worker) error) (up, down time.Duration, err error) {
	p, err := hal.Lookup("a2a3sim")
	if err != nil {
		return 0, 0, err
	}
	cfg.Level, cfg.Platform = 4, p
	ups, downs := make([]time.Duration, groupReps), make([]time.Duration, groupReps)
	for i := range groupReps {
		top, err := engine.NewWorker(cfg)
		if err != nil {
			return 0, 0, err
		}
		if err := add(top); err != nil {
			top.Close()
			return 0, 0, err
		}
		start := time.Now()
		if err := top.Init(); err != nil {
			top.Close()
			return 0, 0, err
		}
		ups[i] = time.Since(start)
		start = time.Now()
		if err := top.Close(); err != nil {
			return 0, 0, err
		}
		downs[i] = time.Since(start)
	}
	return mid(ups), mid(downs), nil
}

// The round trip: one level-4 worker with a node on a listening daemon
// and a group of one rank, each sent whole runs of one no-op task in
// turn, a block of runs at a time, so that load from elsewhere meets both
// alike; the same with runs of 256 tasks. Each line is one run: node
// kind, tasks, block, nanoseconds.
const groupScript = `
load("kernels.star", "node_noop")

def orch(o, args, cfg):
    for i in range(args.scalar(1)):
        o.submit_next_level(node_noop, worker = args.scalar(0))

def main(ctx):
    w = Worker(level = 4, platform = "a2a3sim")
    nodes = [("daemon", w.add_remote_worker(endpoint = ctx.argv[0], platform = "a2a3sim", device_ids = [0]))]
    nodes.append(("rank", w.add_worker_group(ranks = 1, launcher = "mpirun", launcher_args = LAUNCHER_ARGS, platform = "a2a3sim", device_ids = [0])[0]))
    w.register(node_noop)
    w.init()
    for n, blocks, reps in [(1, 16, 15), (256, 4, 3)]:
        for b in range(blocks):
            for name, node in (nodes if b % 2 == 0 else reversed(nodes)):
                for r in range(reps):
                    start = time.now()
                    w.run(orch, TaskArgs(scalars = [node, n]))
                    print(name, n, b, (time.now() - start).nanoseconds)
    w.close()
`

// roundTrip is what groupScript measured: the median run of 1 and of 256
// tasks by node kind ("rank", "daemon"), and the dialled-in rank's cost
// against the daemon's node as the median over blocks of the ratio of
// their medians in that block (neighbours in time, so under the same
// load).
type roundTrip struct {
	median map[string]map[int]time.Duration
	ratio  float64
}

// groupRoundTrip runs groupScript against the daemon at addr, with env
// for mpirun.
func groupRoundTrip(addr string, env []string) (roundTrip, error) {
	dir, err := os.MkdirTemp("", "simpler-bench-")
	if err != nil {
		return roundTrip{}, err
	}
	defer os.RemoveAll(dir)
	quoted := make([]string, len(groupLauncherArgs))
	for i, a := range groupLauncherArgs {
		quoted[i] = strconv.Quote(a)
	}
	path := filepath.Join(dir, "group.star")
	os.WriteFile(path, []byte(strings.Replace(groupScript, "LAUNCHER_ARGS", "["+strings.Join(quoted, ", ")+"]", 1)), 0o600)
	os.WriteFile(filepath.Join(dir, "kernels.star"), []byte(remoteKernels), 0o600)
	var out bytes.Buffer
	s := starlib.NewSession("a2a3sim", nil, "thread", []string{addr}, &out, &out)
	s.GroupEnv = env
	err = s.RunFile(path)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return roundTrip{}, fmt.Errorf("%s\n%s", starlib.Backtrace(err), out.String())
	}
	return parseRoundTrip(out.String())
}

// parseRoundTrip reads groupScript's lines.
func parseRoundTrip(out string) (roundTrip, error) {
	type key struct {
		name     string
		n, block int
	}
	runs := map[key][]time.Duration{}
	all := map[string]map[int][]time.Duration{"rank": {}, "daemon": {}}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var k key
		var ns int64
		if c, err := fmt.Sscan(line, &k.name, &k.n, &k.block, &ns); err != nil || c != 4 || all[k.name] == nil {
			return roundTrip{}, fmt.Errorf("the group round-trip script printed %q", line)
		}
		runs[k] = append(runs[k], time.Duration(ns))
		all[k.name][k.n] = append(all[k.name][k.n], time.Duration(ns))
	}
	rt := roundTrip{median: map[string]map[int]time.Duration{}}
	for name, byN := range all {
		rt.median[name] = map[int]time.Duration{}
		for n, ds := range byN {
			rt.median[name][n] = mid(ds)
		}
	}
	var ratios []float64
	for b := 0; ; b++ {
		r, d := runs[key{"rank", 1, b}], runs[key{"daemon", 1, b}]
		if len(r) == 0 || len(d) == 0 {
			break
		}
		ratios = append(ratios, float64(mid(r))/float64(mid(d)))
	}
	if len(ratios) == 0 || rt.median["rank"][256] == 0 || rt.median["daemon"][256] == 0 {
		return roundTrip{}, fmt.Errorf("the group round-trip script printed too little:\n%s", out)
	}
	sort.Float64s(ratios)
	rt.ratio = ratios[len(ratios)/2]
	return rt, nil
}

// print prints the round trips side by side and whether the dialled-in
// rank's no-op task costs what the listening daemon's does, within this
// machine's noise (25%).
func (rt roundTrip) print(w io.Writer) bool {
	r, d := rt.median["rank"], rt.median["daemon"]
	fmt.Fprintf(w, "  %-34s %8.1f us per run of one task (a rank of mpirun that dialled in)\n", "no-op task, dialled-in rank", micros(r[1]))
	fmt.Fprintf(w, "  %-34s %8.1f us per run of one task (add_remote_worker, a session of the daemon)\n", "no-op task, listening daemon", micros(d[1]))
	fmt.Fprintf(w, "  %-34s %8.0f tasks/s dialled-in, %.0f tasks/s listening (256 per run)\n", "many small remote tasks", 256/r[256].Seconds(), 256/d[256].Seconds())
	fmt.Fprintf(w, "  %-34s %8.2f x (median of runs); per block of neighbouring runs:\n", "dialled-in / listening", float64(r[1])/float64(d[1]))
	return verdict(w, "no-op task, dialled-in / listening", rt.ratio, 1.25, "x")
}
