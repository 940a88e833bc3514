package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// raceRemoteScript is a level-4 program whose remote node 0 runs two
// chip tasks writing one remote buffer: the first OUTPUT_EXISTING, the
// second with tag second. Two OUTPUT_EXISTING writers are not ordered by
// upstream's tag rules (a race, found on the node); an INOUT second is
// ordered after the first (race-free). header is the script's first line.
func raceRemoteScript(header, second string) string {
	return header + `
def put(chip, args):
    args.tensor(0).fill(1)

def node_two_writers(o, args, cfg):
    t = args.tensor(0)
    o.submit_next_level(put, TaskArgs(tensors = [(t, OUTPUT_EXISTING)]), worker = 0)
    o.submit_next_level(put, TaskArgs(tensors = [(t, ` + second + `)]), worker = 0)

def main(ctx):
    w = Worker(level = 4, platform = ctx.platform)
    node = w.add_remote_worker(endpoint = ctx.argv[0], platform = ctx.platform, device_ids = [0])
    for f in [put, node_two_writers]:
        w.register(f)
    w.init()
    buf = w.remote_malloc(worker = node, nbytes = 16)
    def orch(o, args, cfg):
        o.submit_next_level(node_two_writers, TaskArgs(tensors = [(RemoteTensorRef(buf, shape = [4], dtype = INT32), INOUT)]), worker = node)
    w.run(orch)
    w.run(orch)
    w.remote_free(buf)
    w.close()
    print("done")
`
}

// runRaceCLI runs the CLI with args in dir and returns its exit status,
// stdout and stderr; it checks the run left no shared memory.
func runRaceCLI(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	exe, _ := os.Executable()
	run := exec.Command(exe, args...)
	env := cliEnv("NO_COLOR=1")
	run.Dir, run.Env = dir, env
	var stdout, stderr strings.Builder
	run.Stdout, run.Stderr = &stdout, &stderr
	err := run.Run()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatalf("%v: %v", args, err)
	}
	checkNoShm(t, env)
	return run.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// checkRemoteRaceReport checks stderr of a run whose node 0 found the
// script's one race (twice, in two runs: one report, counted once): a
// report block whose every line is whole, tagged with the node and in
// order, then the summary counting it.
func checkRemoteRaceReport(t *testing.T, what string, stderr string) {
	t.Helper()
	want := []string{"==================", "WARNING: DATA RACE", "Write of bytes [0, 16) of remote buffer 1 (generation 1) of this node by put (task 2",
		"  put()", "      s.star:", "", "Previous write of bytes [0, 16) of remote buffer 1 (generation 1) of this node by put (task 1",
		"  put()", "      s.star:", "", "Unordered: no task dependency: an OUTPUT or OUTPUT_EXISTING", "=================="}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) != len(want)+2 {
		t.Fatalf("%s: stderr has %d lines, want the %d of one report and 2 of the summary:\n%s", what, len(lines), len(want), stderr)
	}
	for i, w := range want {
		body, ok := strings.CutPrefix(lines[i], "[node 0] ")
		if !ok || !strings.HasPrefix(body, w) || (w == "" && body != "") {
			t.Fatalf("%s: line %d is %q, want [node 0] %s...\n%s", what, i, lines[i], w, stderr)
		}
	}
	if got := lines[len(want):]; got[0] != "simpler: found 1 data race(s)" || got[1] != "simpler: 1 on node 0, 0 in this process" {
		t.Errorf("%s: summary %q", what, got)
	}
}

// simpler run --race against a daemon started with --race: the node
// checks what runs on it; its report reaches the level-4 process's
// stderr tagged [node 0], the summary counts it and the run exits 66,
// whether the level-4 worker runs in thread or process mode. The same
// program made race-free exits 0 with nothing on stderr. What the node
// found counts even when the level-4 run has no --race of its own.
func TestRaceRemoteNodeReportsToTheParent(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"s.star": raceRemoteScript("", "OUTPUT_EXISTING"), "clean.star": raceRemoteScript("", "INOUT")})
	_, addr, _ := startDaemonWith(t, []string{"--race"}, nil)
	for _, mode := range []string{"thread", "process"} {
		code, stdout, stderr := runRaceCLI(t, dir, "run", "--race", "--mode", mode, "s.star", addr)
		if code != exitRace || stdout != "done\n" {
			t.Fatalf("%s: exit %d, stdout %q, want %d and done\n%s", mode, code, stdout, exitRace, stderr)
		}
		checkRemoteRaceReport(t, mode, stderr)
		code, stdout, stderr = runRaceCLI(t, dir, "run", "--race", "--mode", mode, "clean.star", addr)
		if code != 0 || stdout != "done\n" || stderr != "" {
			t.Errorf("%s, race-free: exit %d, stdout %q, stderr %q; want 0, done, nothing", mode, code, stdout, stderr)
		}
	}
	// What the node's daemon checked counts without --race here too.
	code, stdout, stderr := runRaceCLI(t, dir, "run", "s.star", addr)
	if code != exitRace || stdout != "done\n" {
		t.Fatalf("without --race here: exit %d, stdout %q, want %d and done\n%s", code, stdout, exitRace, stderr)
	}
	checkRemoteRaceReport(t, "without --race here", stderr)
}

// A daemon started without --race serving a parent with --race: the run
// is not failed, and says once that the node was not checked.
func TestRaceRemoteUncheckedNodeIsNamed(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"s.star": raceRemoteScript("", "OUTPUT_EXISTING")})
	_, addr, _ := startDaemonWith(t, nil, nil)
	code, stdout, stderr := runRaceCLI(t, dir, "run", "--race", "s.star", addr)
	warning := "simpler: warning: node 0 was not checked for data races: its remote-l3-worker daemon runs without --race\n"
	if code != 0 || stdout != "done\n" || stderr != warning {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0, done and the one warning", code, stdout, stderr)
	}
}

// The daemons a script's # simpler-daemons: header asks for inherit
// --race from simpler run: the race on the node is found and counted
// (exit 66). Without --race they check nothing and the run exits 0.
func TestRaceScriptDaemonsInheritRace(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"s.star": raceRemoteScript("# simpler-daemons: 1\n", "OUTPUT_EXISTING")})
	code, stdout, stderr := runRaceCLI(t, dir, "run", "--race", "s.star")
	if code != exitRace || stdout != "done\n" {
		t.Fatalf("exit %d, stdout %q, want %d and done\n%s", code, stdout, exitRace, stderr)
	}
	checkRemoteRaceReport(t, "# simpler-daemons: 1", stderr)
	code, stdout, stderr = runRaceCLI(t, dir, "run", "s.star")
	if code != 0 || stdout != "done\n" || stderr != "" {
		t.Errorf("without --race: exit %d, stdout %q, stderr %q; want 0, done, nothing", code, stdout, stderr)
	}
}

// simpler test --race starts a script's # simpler-daemons: with --race
// too: the race on the node fails the script (its exit status and report
// differ from the golden file), which passes without --race.
func TestRaceSimplerTestDaemonsInheritRace(t *testing.T) {
	t.Setenv(asCLI, "1") // the scripts and daemons started through os.Executable() are this binary
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"s.star": raceRemoteScript("# simpler-daemons: 1\n", "OUTPUT_EXISTING"),
		"s.golden": "-- exit --\n0\n-- stdout --\ndone\n-- stderr --\n"})
	if code, out, errs := runCLI(t, "test", dir); code != 0 {
		t.Fatalf("without --race: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs := runCLI(t, "test", "--race", dir)
	if code != 1 || !strings.Contains(out, "+66\n") || !strings.Contains(out, "+[node 0] WARNING: DATA RACE\n") || !strings.Contains(out, "+simpler: 1 on node 0, 0 in this process\n") {
		t.Errorf("with --race: exit %d, want 1 with the node's report in the diff\n%s%s", code, out, errs)
	}
}

// raceNodeScript is raceRemoteScript's program on a local level-3 node
// (a node process when the level-4 worker runs in process mode), on a
// host tensor of the script.
func raceNodeScript(second string) string {
	return `
def put(chip, args):
    args.tensor(0).fill(1)

def node_two_writers(o, args, cfg):
    t = args.tensor(0)
    o.submit_next_level(put, TaskArgs(tensors = [(t, OUTPUT_EXISTING)]), worker = 0)
    o.submit_next_level(put, TaskArgs(tensors = [(t, ` + second + `)]), worker = 0)

def main(ctx):
    w = Worker(level = 4, platform = ctx.platform, mode = ctx.mode)
    w.add_worker(Worker(level = 3, platform = ctx.platform, device_ids = [0], mode = "thread"))
    for f in [put, node_two_writers]:
        w.register(f)
    w.init()
    x = host_tensor(shape = [4], dtype = INT32)
    def orch(o, args, cfg):
        o.submit_next_level(node_two_writers, TaskArgs(tensors = [(x, INOUT)]), worker = 0)
    w.run(orch)
    w.run(orch)
    w.close()
    print("done")
`
}

// A level-4 worker in process mode runs its level-3 node as a process:
// under --race the node process gets a detector (its NodeConfig says so),
// its report reaches the parent's stderr (inherited), and its count comes
// back by message after each of its tasks: the summary counts it on the
// node process and the run exits 66, as the same program does in thread
// mode. The race-free program exits 0 with nothing on stderr.
func TestRaceNodeProcessReportsToTheParent(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"s.star": raceNodeScript("OUTPUT_EXISTING"), "clean.star": raceNodeScript("INOUT")})
	for _, c := range []struct{ mode, where string }{
		{"thread", ""},
		{"process", "simpler: 1 on node process 0, 0 in this process\n"},
	} {
		code, stdout, stderr := runRaceCLI(t, dir, "run", "--race", "--mode", c.mode, "s.star")
		if code != exitRace || stdout != "done\n" {
			t.Fatalf("%s: exit %d, stdout %q, want %d and done\n%s", c.mode, code, stdout, exitRace, stderr)
		}
		if strings.Count(stderr, "WARNING: DATA RACE\n") != 1 || !strings.Contains(stderr, "\nUnordered: no task dependency: an OUTPUT or OUTPUT_EXISTING") ||
			!strings.HasSuffix(stderr, "simpler: found 1 data race(s)\n"+c.where) {
			t.Errorf("%s: want one report and the count of 1 (%q):\n%s", c.mode, c.where, stderr)
		}
		code, stdout, stderr = runRaceCLI(t, dir, "run", "--race", "--mode", c.mode, "clean.star")
		if code != 0 || stdout != "done\n" || stderr != "" {
			t.Errorf("%s, race-free: exit %d, stdout %q, stderr %q; want 0, done, nothing", c.mode, code, stdout, stderr)
		}
	}
}

// A global domain whose ranks span nodes: under --race each node's
// detector sees its own ranks only, so a rank waiting for another node's
// is not a deadlock there (a session, or a node process, counts its live
// global domains as work it cannot see). The ranks of a worker group
// (mpirun_group) are started with --race too, so none is named as not
// checked. The shipped examples over remote nodes and node processes run
// clean: exit 0 and nothing on stderr, with the output they have without
// --race.
func TestRaceRemoteGlobalDomainsRunClean(t *testing.T) {
	dir, _ := filepath.Abs("../../scripts/examples")
	for _, c := range []struct{ name, mode string }{
		{"global_ring_remote_l3.star", "thread"},
		{"global_allreduce_mixed_l3.star", "thread"},
		{"global_tload_mixed_l3.star", "process"},
		{"mpirun_group.star", "thread"},
	} {
		plainCode, plain, _ := runRaceCLI(t, dir, "run", "--mode", c.mode, c.name)
		code, stdout, stderr := runRaceCLI(t, dir, "run", "--race", "--mode", c.mode, c.name)
		if code != 0 || plainCode != 0 || stderr != "" || stdout != plain {
			t.Errorf("%s --mode %s: exit %d (without --race %d), stdout %q (without --race %q), stderr:\n%s", c.name, c.mode, code, plainCode, stdout, plain, stderr)
		}
	}
}

// raceDeadlockScript: on remote node 0, rank 0 of a domain over its two
// chips waits in a barrier that rank 1 skips.
const raceDeadlockScript = `
def half_barrier(chip, args):
    comm = chip.comm(args.scalar(0))
    if comm.rank == 0:
        comm.barrier()

def node_orch(o, args, cfg):
    h = o.allocate_domain(name = "half", workers = [0, 1], window_size = 4096)
    o.submit_next_level_group(half_barrier, [TaskArgs(scalars = [h[c].device_ctx]) for c in [0, 1]], workers = [0, 1])
    h.release()

def main(ctx):
    w = Worker(level = 4, platform = ctx.platform)
    node = w.add_remote_worker(endpoint = ctx.argv[0], platform = ctx.platform, device_ids = [0, 1])
    for f in [half_barrier, node_orch]:
        w.register(f)
    w.init()
    w.run(lambda o, args, cfg: o.submit_next_level(node_orch, TaskArgs(), worker = node))
    w.close()
`

// A deadlock on a remote node (a domain of the node's own chips) is
// reported by the node's detector at once, not at a timeout: the report
// reaches the parent tagged [node 0], naming the rank that waits and the
// one that never arrived, and the run fails with the deadlock's
// RuntimeError (exit 1: the script's own failure, no race).
func TestRaceRemoteNodeDeadlock(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"dl.star": raceDeadlockScript})
	_, addr, _ := startDaemonWith(t, []string{"--race"}, nil)
	start := time.Now()
	code, _, stderr := runRaceCLI(t, dir, "run", "--race", "dl.star", addr)
	for _, want := range []string{
		"[node 0] DEADLOCK: every kernel that runs waits, and nothing left to run could wake one\n",
		"[node 0]   waits in comm.barrier() #1 of domain \"half\" (2 ranks); not arrived: rank(s) 1\n",
		"RuntimeError: remote_worker 0 > chip_worker 0 (device 0): task 1 running \"half_barrier\" failed: comm.barrier on domain \"half\" rank 0: stopped: deadlock: rank 0 waits in comm.barrier()",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if code != 1 || time.Since(start) > 10*time.Second {
		t.Errorf("exit %d after %v, want 1 at once", code, time.Since(start))
	}
}

// raceSuiteScript runs body as the orchestration of node 0, once, with t
// four INT32 the level-4 script gives it and x a host tensor of the
// node's own. On a remote node (remote) t is a remote buffer; on a local
// node (a node process in process mode) a host tensor of the script.
func raceSuiteScript(remote bool, body string) string {
	node := `w.add_worker(Worker(level = 3, platform = ctx.platform, device_ids = [0], mode = "thread"))`
	tensor := `t = host_tensor(shape = [4], dtype = INT32)`
	free := ""
	if remote {
		node = `w.add_remote_worker(endpoint = ctx.argv[0], platform = ctx.platform, device_ids = [0])`
		tensor = `buf = w.remote_malloc(worker = node, nbytes = 16)
    t = RemoteTensorRef(buf, shape = [4], dtype = INT32)`
		free = "    w.remote_free(buf)\n"
	}
	return `
def put(chip, args):
    args.tensor(0).fill(1)

def put_atomic(chip, args):
    args.tensor(0).as_atomic().fill(1)

def get(chip, args):
    args.tensor(0).read()

def node_orch(o, args, cfg):
    t = args.tensor(0)
    x = host_tensor(shape = [4], dtype = INT32)
` + body + `
def main(ctx):
    w = Worker(level = 4, platform = ctx.platform, mode = ctx.mode)
    for f in [put, put_atomic, get, node_orch]:
        w.register(f)
    node = ` + node + `
    w.init()
    ` + tensor + `
    w.run(lambda o, args, cfg: o.submit_next_level(node_orch, TaskArgs(tensors = [(t, INOUT)]), worker = node))
` + free + `    w.close()
`
}

// Small programs on a node, each labelled racy or race-free, run under
// --race on a remote node (a daemon with --race) and on a level-3 node
// process (a level-4 worker in process mode): a racy one exits 66 with
// one report saying why the two accesses are unordered, tagged [node 0]
// on the remote node; a race-free one exits 0 with nothing on stderr.
func TestRaceRemoteSuite(t *testing.T) {
	task := func(k, tensor, tag string) string {
		return "    o.submit_next_level(" + k + ", TaskArgs(tensors = [(" + tensor + ", " + tag + ")]), worker = 0)\n"
	}
	const writers = "Unordered: no task dependency: an OUTPUT or OUTPUT_EXISTING (insert-only) does not wait for an earlier writer"
	cases := []struct {
		name, body, report string // report: "" for race-free, else a line of the report
	}{
		{"two writers through OUTPUT_EXISTING", task("put", "t", "OUTPUT_EXISTING") + task("put", "t", "OUTPUT_EXISTING"), writers},
		{"reader then writer without a dependency", task("get", "t", "INPUT") + task("put", "t", "OUTPUT_EXISTING"),
			"Unordered: no task dependency: a writer (OUTPUT, OUTPUT_EXISTING or INOUT) does not wait for an earlier reader"},
		{"writer then reader", task("put", "t", "OUTPUT_EXISTING") + task("get", "t", "INPUT"), ""},
		{"atomics vs atomics", task("put_atomic", "t", "OUTPUT_EXISTING") + task("put_atomic", "t", "OUTPUT_EXISTING"), ""},
		{"atomic vs plain store", task("put_atomic", "t", "OUTPUT_EXISTING") + task("put", "t", "OUTPUT_EXISTING"), writers},
		{"the node's orchestration reads a host tensor a task may still write", task("put", "x", "OUTPUT_EXISTING") + "    x.read()\n",
			"Unordered: the orchestration"}, // which of the two came second varies
		{"the node's orchestration reads before it submits the writer", "    x.read()\n" + task("put", "x", "OUTPUT_EXISTING"), ""},
	}
	dir := t.TempDir()
	_, addr, _ := startDaemonWith(t, []string{"--race"}, nil)
	for i, c := range cases {
		for _, where := range []string{"remote node", "node process"} {
			remote := where == "remote node"
			name := fmt.Sprintf("p%d_%v.star", i, remote)
			writeFiles(t, dir, map[string]string{name: raceSuiteScript(remote, c.body)})
			args, tag := []string{"run", "--race", "--mode", "process", name}, ""
			if remote {
				args, tag = []string{"run", "--race", name, addr}, "[node 0] "
			}
			code, _, stderr := runRaceCLI(t, dir, args...)
			switch {
			case c.report == "" && (code != 0 || stderr != ""):
				t.Errorf("%s, %s (race-free): exit %d, stderr:\n%s", c.name, where, code, stderr)
			case c.report != "" && (code != exitRace || strings.Count(stderr, tag+"WARNING: DATA RACE\n") != 1 || !strings.Contains(stderr, tag+c.report)):
				t.Errorf("%s, %s (racy): exit %d, want %d and one report with %q:\n%s", c.name, where, code, exitRace, c.report, stderr)
			}
		}
	}
}
