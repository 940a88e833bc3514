package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"simpler/hal/shm"
)

// The decision of what each signal does, stepped directly.
func TestSignalState(t *testing.T) {
	for _, c := range []struct {
		sigs []os.Signal
		want []signalAction
	}{
		{[]os.Signal{syscall.SIGINT, syscall.SIGINT}, []signalAction{cancelRuns, forceEnd}},
		{[]os.Signal{syscall.SIGTERM}, []signalAction{cancelRunsBounded}},
		{[]os.Signal{syscall.SIGHUP, syscall.SIGINT}, []signalAction{cancelRunsBounded, forceEnd}},
		{[]os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGINT}, []signalAction{cancelRuns, forceEnd, forceEnd}},
	} {
		var st signalState
		for i, sig := range c.sigs {
			if got := st.next(sig); got != c.want[i] {
				t.Errorf("%v: signal %d (%v) does %d, want %d", c.sigs, i, sig, got, c.want[i])
			}
		}
		if st.first != c.sigs[0] {
			t.Errorf("%v: the first signal is %v", c.sigs, st.first)
		}
	}
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

func itoa(n int) string { return strconv.Itoa(n) }

// longTestsEnv, set, adds the cases that take the whole close bound.
const longTestsEnv = "SIMPLER_LONG_TESTS"

// stuckScript blocks both ranks of a group in comm.wait, which nothing
// signals: a cancel does not reach a thread-mode kernel there (it waits
// for its timeout), so a graceful close takes close_timeout_s and more; a
// process-mode kernel that does not stop is killed after a second.
const stuckScript = `
def stuck(chip, args):
    comm = chip.comm(args.scalar(0))
    args.tensor(1).fill(1)
    comm.wait(args.tensor(0), 1, cmp = ">=", timeout_s = 60)

def orch(o, args, cfg):
    d = o.allocate_domain(name = "pair", workers = [0, 1], window_size = 4096, buffers = [
        CommBufferSpec(name = "ready", dtype = INT32, count = 1),
    ])
    o.submit_next_level_group(stuck, [TaskArgs(tensors = [(d[c].buffer("ready"), NO_DEP), (args.tensor(0), OUTPUT_EXISTING)],
        scalars = [d[c].device_ctx]) for c in d.workers], workers = d.workers)
    d.release()

def main(ctx):
    w = Worker(level = 3, platform = ctx.platform, device_ids = [0, 1], mode = ctx.mode)
    w.register(stuck)
    w.init()
    x = host_tensor(shape = [1])
    r = w.submit(orch, TaskArgs(tensors = [(x, OUTPUT_EXISTING)]))
    for i in range(10000000):
        if x.read()[0] == 1.0:
            break
    print("started")
    r.wait()
`

// A second SIGINT ends simpler run at once, and SIGTERM within the close
// bound, in thread and process mode, with a script blocked in a task that
// a cancel does not stop: the exit status is 128+signal, the child
// processes it started are gone, and neither it nor they left shared
// memory behind. (Signals of one kind sent together may arrive as one, so
// the second SIGINT is sent again until the process ends.)
func TestRunEndsOnSecondSignalOrTerm(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"stuck.star": stuckScript})
	exe, _ := os.Executable()
	type signalCase struct {
		sig   syscall.Signal
		again bool // send it again until the process ends
		mode  string
		code  int
		bound time.Duration
	}
	cases := []signalCase{
		{syscall.SIGINT, true, "thread", 130, killBound + 3*time.Second},
		{syscall.SIGINT, true, "process", 130, killBound + 3*time.Second},
		{syscall.SIGTERM, false, "process", 143, forceAfter + killBound + 2*time.Second},
	}
	if os.Getenv(longTestsEnv) != "" {
		// The graceful close cannot end (main waits on a run whose
		// kernel heeds no stop): forceAfter ends it, 13 s.
		cases = append(cases, signalCase{syscall.SIGTERM, false, "thread", 143, forceAfter + killBound + 2*time.Second})
	}
	for _, c := range cases {
		name := c.mode + "/" + c.sig.String()
		run := exec.Command(exe, "run", "--mode", c.mode, filepath.Join(dir, "stuck.star"))
		run.Env = cliEnv()
		stderr := startUntil(t, run, "started", name)
		kids := childPids(run.Process.Pid)
		if c.mode == "process" && len(kids) == 0 {
			t.Errorf("%s: no child processes to end", name)
		}
		start := time.Now()
		exited := make(chan error, 1)
		go func() { exited <- run.Wait() }()
		run.Process.Signal(c.sig)
		var err error
		for waiting := true; waiting; {
			select {
			case err = <-exited:
				waiting = false
			case <-time.After(100 * time.Millisecond):
				if c.again {
					run.Process.Signal(c.sig)
				}
			}
		}
		took := time.Since(start)
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != c.code || took > c.bound {
			t.Errorf("%s: exit %d after %v (%v), stderr %q; want %d within %v", name, code, took, err, stderr.String(), c.code, c.bound)
		}
		t.Logf("%s: exit %d after %v: %q", name, code, took, stderr.String())
		// A killed child is gone at once; poll briefly for the kernel to
		// reap it.
		for _, k := range kids {
			for deadline := time.Now().Add(3 * time.Second); alive(k) && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if alive(k) {
				t.Errorf("%s: child %d still runs", name, k)
				syscall.Kill(k, syscall.SIGKILL)
			}
		}
		checkNoShm(t, run.Env) // its children share its prefix
	}
}

// remoteStuckScript runs a kernel that never ends on a remote node of a
// daemon simpler run starts itself (# simpler-daemons).
const remoteStuckScript = `# simpler-daemons: 1
def spin(chip, args):
    args.tensor(0).fill(1)
    while True:
        pass

def node_spin(o, args, cfg):
    o.submit_next_level(spin, TaskArgs(tensors = [(args.tensor(0), OUTPUT_EXISTING)]), worker = 0)

def main(ctx):
    w = Worker(level = 4, platform = ctx.platform)
    w.add_remote_worker(endpoint = ctx.argv[0], platform = ctx.platform, device_ids = [0])
    w.register(spin)
    w.register(node_spin)
    w.init()
    buf = w.remote_malloc(worker = 0, nbytes = 4)
    r = w.submit(lambda o, a, c: o.submit_next_level(node_spin, TaskArgs(tensors = [(RemoteTensorRef(buf, shape = [1]), OUTPUT_EXISTING)]), worker = 0))
    print("submitted")
    r.wait()
`

// descendants are pid's children, their children, and so on.
func descendants(pid int) []int {
	var all []int
	for _, k := range childPids(pid) {
		all = append(all, k)
		all = append(all, descendants(k)...)
	}
	return all
}

// SIGINT, sent again until it ends, to simpler run whose script runs a
// task on a remote node of a daemon it started ends it within the kill
// bound (gracefully, or by the second signal): the daemon and its session
// process are gone, and none of them left shared memory behind.
func TestRunInterruptedRemote(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"remote.star": remoteStuckScript})
	exe, _ := os.Executable()
	run := exec.Command(exe, "run", filepath.Join(dir, "remote.star"))
	run.Env = cliEnv()
	stderr := startUntil(t, run, "submitted", "the remote script")
	awaitSpinning(t, "the kernel to spin on the node", func() []int { return descendants(run.Process.Pid) })
	started := descendants(run.Process.Pid)
	if len(started) < 2 {
		t.Errorf("processes started: %v, want the daemon and its session", started)
	}
	prefixes := map[string]bool{prefixOf(run.Env): true} // a session has a prefix of its own
	for _, k := range started {
		if p := pidPrefix(k); p != "" {
			prefixes[p] = true
		}
	}
	start := time.Now()
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	run.Process.Signal(syscall.SIGINT)
	var err error
	for waiting := true; waiting; {
		select {
		case err = <-exited:
			waiting = false
		case <-time.After(100 * time.Millisecond):
			run.Process.Signal(syscall.SIGINT)
		}
	}
	took := time.Since(start)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 130 || took > killBound+3*time.Second {
		t.Errorf("exit %d after %v (%v), stderr %q; want 130 within %v", code, took, err, stderr.String(), killBound+3*time.Second)
	}
	t.Logf("processes %v; exit %d after %v: %q", started, code, took, stderr.String())
	for _, k := range started {
		for deadline := time.Now().Add(5 * time.Second); alive(k) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(k) {
			t.Errorf("process %d it started still runs", k)
			syscall.Kill(k, syscall.SIGKILL)
		}
	}
	// The run's own prefix it cleans itself. A session's is its daemon's
	// to sweep once it has reaped it; a session the second signal killed
	// together with its daemon leaves that to the next sweep, so what it
	// left must at least be provably dead: the sweep removes it all.
	own := prefixOf(run.Env)
	for p := range prefixes {
		if p != own {
			if removed := shm.SweepPrefix(p); len(removed) > 0 {
				t.Logf("a killed session's prefix, swept: %v", removed)
			}
		}
		checkNoShmPrefix(t, p)
	}
}
