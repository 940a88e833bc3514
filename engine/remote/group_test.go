package remote

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"simpler/engine"
	"simpler/engine/global"
	"simpler/internal/enginetest"
	"simpler/internal/hostid"
	"simpler/internal/mpitest"
	"simpler/internal/token"
	"simpler/wire"
)

// Worker groups with their ranks started by real Open MPI on 127.0.0.1,
// or by the test (launcher "none"). A rank is this test binary again
// (rankEnv), running ServeRank with the flags a launcher gives it; its
// session processes are this binary too (sessionEnv).
const rankEnv = "SIMPLER_REMOTE_TEST_RANK"

// runTestRank is a rank: `remote-l3-worker --connect ...` as the CLI
// parses it, with the test kernels in its sessions.
func runTestRank(args []string) int {
	fs := flag.NewFlagSet("rank", flag.ContinueOnError)
	connect := fs.String("connect", "", "")
	tokenFile := fs.String("token-file", "", "")
	rank := fs.String("rank", "", "")
	platform := fs.String("platform", "a2a3sim", "")
	devices := fs.String("devices", "", "")
	timeout := fs.Duration("connect-timeout", time.Minute, "")
	if len(args) > 0 && args[0] == "remote-l3-worker" {
		args = args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	tok, err := token.Read(*tokenFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test rank:", err)
		return 2
	}
	cfg := RankConfig{Connect: *connect, Token: tok, Platform: *platform, Timeout: *timeout}
	if *rank != "" {
		cfg.Rank, _ = strconv.Atoi(*rank)
	} else if cfg.Rank, _, err = RankFromEnv(os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "test rank:", err)
		return 1
	}
	for _, d := range strings.Split(*devices, ",") {
		if n, err := strconv.Atoi(d); err == nil {
			cfg.DeviceIDs = append(cfg.DeviceIDs, n)
		}
	}
	exe, _ := os.Executable()
	cfg.Daemon = DaemonConfig{Log: os.Stderr, Session: &engine.Launcher{Path: exe, Env: []string{sessionEnv + "=1", rankEnv + "="}}}
	if err := ServeRank(cfg, nil); err != nil {
		fmt.Fprintln(os.Stderr, "test rank:", err)
		return 1
	}
	return 0
}

// groupTest is one test's level-4 worker over a group, and what the test
// sees of it: the group as it started (its ranks' processes), and the
// ranks the test started itself.
type groupTest struct {
	t      *testing.T
	w      *engine.Worker
	ids    []int
	start  func(addr, tokenFile string) // with launcher "none": starts the ranks
	mu     sync.Mutex
	group  *group
	ranks  []*rankProc
	listen string
}

// rankProc is a rank the test started, and what it wrote.
type rankProc struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan struct{}
}

// newGroupTest makes a level-4 worker with one group of spec (defaults
// filled in); the test's kernels are registered. start, when not nil,
// starts the ranks of a launcher "none" group once it listens.
func newGroupTest(t *testing.T, spec engine.GroupSpec, cfg engine.Config) *groupTest {
	t.Helper()
	if spec.Platform == "" {
		spec.Platform = "a2a3sim"
	}
	if spec.DeviceIDs == nil {
		spec.DeviceIDs = []int{0}
	}
	if spec.Listen == "" {
		spec.Listen = "127.0.0.1:0"
	}
	gt := &groupTest{t: t}
	exe, _ := os.Executable()
	sc := StarterConfig{Rank: []string{exe, "remote-l3-worker"}, Env: append([]string{rankEnv + "=1"}, mpitest.Env()...),
		OnListen: func(req engine.GroupRequest, addr, tokenFile string) {
			gt.mu.Lock()
			gt.listen = addr
			start := gt.start
			gt.mu.Unlock()
			if start != nil && req.Spec.Launcher == engine.LauncherNone {
				start(addr, tokenFile)
			}
		}}
	cfg.Level, cfg.Platform, cfg.Dial = 4, sim(t), Dial
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = 5 * time.Second
	}
	cfg.StartGroup = func(req engine.GroupRequest) (engine.RemoteGroup, error) {
		g, err := startGroup(sc, req)
		if err != nil {
			return nil, err
		}
		gt.mu.Lock()
		gt.group = g
		gt.mu.Unlock()
		return g, nil
	}
	w, err := engine.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gt.w = w
	if gt.ids, err = w.AddWorkerGroup(spec); err != nil {
		t.Fatal(err)
	}
	register(t, w, nodeOrch{procKernel{"node_add1"}})
	register(t, w, procKernel{"add1"})
	register(t, w, nodeOrch{procKernel{"node_hang"}})
	register(t, w, procKernel{"hang"})
	t.Cleanup(gt.waitRanks)
	return gt
}

// startRank starts rank (-1: from env) of a launcher "none" group at addr,
// a process of this test binary; env is added to its environment.
func (gt *groupTest) startRank(addr, tokenFile string, rank int, env []string, args ...string) *rankProc {
	exe, _ := os.Executable()
	argv := []string{"remote-l3-worker", "--connect", addr, "--token-file", tokenFile, "--connect-timeout", "20s"}
	if rank >= 0 {
		argv = append(argv, "--rank", strconv.Itoa(rank))
	}
	p := &rankProc{cmd: exec.Command(exe, append(argv, args...)...), done: make(chan struct{})}
	p.cmd.Env = append(append(os.Environ(), rankEnv+"=1"), env...)
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		gt.t.Error(err)
		close(p.done)
		return p
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	gt.mu.Lock()
	gt.ranks = append(gt.ranks, p)
	gt.mu.Unlock()
	return p
}

// waitRanks requires every rank the test started to end by itself once
// its worker is gone: nothing is left running.
func (gt *groupTest) waitRanks() {
	gt.mu.Lock()
	ranks := gt.ranks
	gt.mu.Unlock()
	for _, p := range ranks {
		select {
		case <-p.done:
		case <-time.After(deadline):
			p.cmd.Process.Kill()
			<-p.done
			gt.t.Errorf("rank process %d still running %v after its worker ended; killed", p.cmd.Process.Pid, deadline)
		}
	}
}

// init brings the worker up; the test closes it.
func (gt *groupTest) init() {
	gt.t.Helper()
	if err := gt.w.Init(); err != nil {
		gt.w.Close()
		gt.t.Fatal(err)
	}
}

// processGone reports whether pid has exited (and been reaped, or is a
// zombie of a parent that is not this process).
func processGone(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err != nil || strings.Contains(string(b), ") Z ")
}

// newGroup is newGroupTest with mpirun as the launcher when it is
// installed (under CI it must be: mpitest.Find), and otherwise every rank
// started by the test (launcher "none").
func newGroup(t *testing.T, spec engine.GroupSpec) *groupTest {
	mpi := mpitest.Find(t) != ""
	spec.Launcher = engine.LauncherMPI
	if !mpi {
		spec.Launcher = engine.LauncherNone
	}
	gt := newGroupTest(t, spec, engine.Config{})
	if !mpi {
		gt.start = func(addr, tokenFile string) {
			for r := range spec.Ranks {
				gt.startRank(addr, tokenFile, r, nil)
			}
		}
	}
	return gt
}

// A three-rank group under mpirun on 127.0.0.1 (more ranks than this
// machine's cores: --oversubscribe, the default on loopback) runs tasks
// on every rank, remote buffers on each and imported across ranks, and a
// global domain across all three; close ends the ranks and the launcher.
func TestGroupOfThreeRanks(t *testing.T) {
	gt := newGroup(t, engine.GroupSpec{Ranks: 3, DeviceIDs: []int{0, 1}})
	w := gt.w
	start := time.Now()
	gt.init()
	t.Logf("3 ranks up in %v", time.Since(start))
	if len(gt.ids) != 3 || gt.ids[0] != 0 || gt.ids[2] != 2 {
		t.Fatalf("ids %v", gt.ids)
	}
	node, _ := w.Registry().Lookup(nodeOrch{procKernel{"node_add1"}}.Digest())
	bufs := make([]*engine.RemoteBuffer, 3)
	for r, id := range gt.ids {
		bufs[r] = enginetest.Must(outside(w).Malloc(id, 8))
		b := make([]byte, 8)
		put64(b, int64(10*r))
		if err := outside(w).CopyTo(bufs[r], b, 0); err != nil {
			t.Fatal(err)
		}
	}
	mustRun(t, w, func(o *engine.Orchestrator) error {
		for r, id := range gt.ids {
			ref := remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: 7}, Ref: engine.RemoteRef{Buf: bufs[r]}}
			for range 2 {
				if _, err := o.SubmitNext(node, mkArgs(ref, engine.InOut), nil, id); err != nil {
					return err
				}
			}
		}
		return nil
	})
	for r := range gt.ids {
		b := make([]byte, 8)
		if err := outside(w).CopyFrom(bufs[r], b, 0); err != nil || get64(b) != int64(10*r+2) {
			t.Errorf("rank %d: %d (%v), want %d", r, get64(b), err, 10*r+2)
		}
	}
	// Rank 2 writes through an import of rank 0's buffer: the ranks'
	// processes resolve the export between them, as daemons do.
	view := enginetest.Must(outside(w).Import(enginetest.Must(outside(w).Export(bufs[0], 0, 8, engine.AccessRW)), gt.ids[2], 0))
	mustRun(t, w, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(node, mkArgs(remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: 7}, Ref: engine.RemoteRef{Buf: view}}, engine.InOut), nil, gt.ids[2])
		return err
	})
	b := make([]byte, 8)
	if err := outside(w).CopyFrom(bufs[0], b, 0); err != nil || get64(b) != 3 {
		t.Errorf("rank 0's buffer after rank 2 wrote through its import: %d (%v), want 3", get64(b), err)
	}
	if err := ReleaseImport(view); err != nil {
		t.Fatal(err)
	}
	// A global domain across the ranks (one host's shared memory: sim).
	spec := global.Spec{Name: "g", Members: [][2]int{{0, 0}, {1, 1}, {2, 0}}, WindowSize: 256}
	mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
		d := enginetest.Must(global.Allocate(o, spec))
		for r := range 3 {
			enginetest.Must(0, d.CopyToGlobal(r, []byte(fmt.Sprintf("rank %d", r)), "", 8))
		}
		for r := range 3 {
			if got := enginetest.Must(d.CopyFromGlobal(r, 6, "", 8)); string(got) != fmt.Sprintf("rank %d", r) {
				t.Errorf("global rank %d staged back %q", r, got)
			}
		}
	}))
	pids := gt.group.pids
	launch := gt.group.launch
	if err := w.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	for r, pid := range pids {
		poll(t, fmt.Sprintf("rank %d (pid %d) to end", r, pid), func() bool { return processGone(pid) })
	}
	if launch != nil {
		select {
		case <-launch.exited:
			if launch.err != nil {
				t.Errorf("mpirun after close: %s\n%s", launch.status(), launch.out)
			}
		default:
			t.Error("mpirun still running after close")
		}
	}
}

// Ranks that cannot all start (2 ranks on a host with one slot) fail
// init within the bound, naming the ranks and mpirun's own words, with
// nothing left running: no launcher, no rank, no listener, no token file.
func TestGroupThatCannotStart(t *testing.T) {
	spec := engine.GroupSpec{Ranks: 2, Launcher: engine.LauncherMPI, Hosts: []string{"127.0.0.1:1"}}
	want := []string{"ranks 0, 1 of 2", "mpirun exited with status", "not enough slots"}
	if mpitest.Find(t) == "" { // the same failure without a launcher: one of the two ranks never comes
		spec.Launcher, spec.Hosts = engine.LauncherNone, nil
		want = []string{"rank 1 of 2 did not join within startup_timeout_s"}
	}
	gt := newGroupTest(t, spec, engine.Config{StartupTimeout: 4 * time.Second})
	gt.start = func(addr, tokenFile string) { gt.startRank(addr, tokenFile, 0, nil) }
	start := time.Now()
	err := gt.w.Init()
	took := time.Since(start)
	if err == nil {
		gt.w.Close()
		t.Fatal("init of a group that cannot start succeeded")
	}
	for _, s := range want {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("init error does not say %q:\n%v", s, err)
		}
	}
	if took > 4*time.Second+2*killGrace {
		t.Errorf("init failed after %v, past its bound of 4s", took)
	}
	if c, err := net.Dial("tcp", gt.listen); err == nil {
		c.Close()
		t.Errorf("the group still listens on %s", gt.listen)
	}
	port := gt.listen[strings.LastIndexByte(gt.listen, ':')+1:]
	n, _ := strconv.Atoi(port)
	if p, _ := token.GroupPathFor(n); fileExists(p) {
		t.Errorf("the group's token file %s is left behind", p)
	}
	gt.waitRanks() // the rank the test started (launcher "none") ends by itself
	if left := leftRunning(gt.listen); len(left) > 0 {
		t.Errorf("processes left running after the failed init: %q", left)
	}
	if err := gt.w.Close(); err != nil {
		t.Errorf("close after a failed init: %v", err)
	}
}

// leftRunning lists the processes still running that a group listening
// on addr started: this process's live children (a launcher), and any
// process told to dial addr (a rank, wherever it was reparented).
func leftRunning(addr string) []string {
	var left []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		i := bytes.LastIndexByte(stat, ')')
		if err != nil || i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		child := len(f) >= 2 && f[0] != "Z" && f[1] == strconv.Itoa(os.Getpid())
		if child || (len(f) >= 1 && f[0] != "Z" && bytes.Contains(cmdline, []byte("--connect\x00"+addr+"\x00"))) {
			left = append(left, fmt.Sprintf("%d %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	return left
}

// cpusAllowed is the CPUs process pid may run on, as /proc says them.
func cpusAllowed(t *testing.T, pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("/proc/%d/status has no Cpus_allowed_list", pid)
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// A rank killed mid-run fails its tasks naming it, and close is clean.
// Before that: each of the two ranks may run on every core this process
// may (mpirun binds two ranks to a core each unless told not to).
func TestGroupRankKilledMidRun(t *testing.T) {
	gt := newGroup(t, engine.GroupSpec{Ranks: 2})
	gt.init()
	w := gt.w
	for r, pid := range gt.group.pids {
		if got, want := cpusAllowed(t, pid), cpusAllowed(t, os.Getpid()); got != want {
			t.Errorf("rank %d (pid %d) may run on CPUs %s, this process on %s: the launcher bound it", r, pid, got, want)
		}
	}
	hang, _ := w.Registry().Lookup(nodeOrch{procKernel{"node_hang"}}.Digest())
	h := enginetest.Must(outside(w).Malloc(gt.ids[1], 8))
	r, err := w.Submit(asBuild(func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(hang, mkArgs(remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: 7}, Ref: engine.RemoteRef{Buf: h}}, engine.OutputExisting), nil, gt.ids[1])
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 8)
	poll(t, "the kernel to start on rank 1", func() bool { return Watch(h, b, 0) == nil && get64(b) == 1 })
	pid := gt.group.pids[1]
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = r.Wait(deadline)
	if err == nil || !strings.Contains(err.Error(), "rank 1 of worker group 0") || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("the run on the killed rank: %v", err)
	}
	if !r.Done() {
		t.Error("the run did not fence")
	}
	if err := w.Close(); err != nil {
		t.Errorf("close after a rank was killed: %v", err)
	}
	for _, p := range gt.group.pids {
		poll(t, "every rank to end", func() bool { return processGone(p) })
	}
}

// With launcher "none" the test starts the ranks, each discovering its
// rank from one launcher's variable; one that never comes fails init
// naming it, and the one that came ends with its worker.
func TestGroupWithRanksStartedByTheTest(t *testing.T) {
	gt := newGroupTest(t, engine.GroupSpec{Ranks: len(RankEnv), Launcher: engine.LauncherNone}, engine.Config{})
	gt.start = func(addr, tokenFile string) {
		for r, v := range RankEnv { // rank r learns its number from RankEnv[r] alone
			env := []string{}
			for _, other := range RankEnv {
				env = append(env, other+"=")
			}
			gt.startRank(addr, tokenFile, -1, append(env, fmt.Sprintf("%s=%d", v, r)))
		}
	}
	gt.init()
	node, _ := gt.w.Registry().Lookup(nodeOrch{procKernel{"node_add1"}}.Digest())
	for r, id := range gt.ids {
		h := enginetest.Must(outside(gt.w).Malloc(id, 8))
		mustRun(t, gt.w, func(o *engine.Orchestrator) error {
			_, err := o.SubmitNext(node, mkArgs(remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: 7}, Ref: engine.RemoteRef{Buf: h}}, engine.InOut), nil, id)
			return err
		})
		b := make([]byte, 8)
		if err := outside(gt.w).CopyFrom(h, b, 0); err != nil || get64(b) != 1 {
			t.Errorf("rank %d (from $%s): %d (%v)", r, RankEnv[r], get64(b), err)
		}
	}
	if err := gt.w.Close(); err != nil {
		t.Fatal(err)
	}
	gt.waitRanks()

	// Rank 1 of 2 never comes: init fails naming it, within the bound.
	gt = newGroupTest(t, engine.GroupSpec{Ranks: 2, Launcher: engine.LauncherNone}, engine.Config{StartupTimeout: 2 * time.Second})
	var first *rankProc
	gt.start = func(addr, tokenFile string) { first = gt.startRank(addr, tokenFile, 0, nil) }
	err := gt.w.Init()
	if err == nil || engine.KindOf(err) != engine.TimeoutError || !strings.Contains(err.Error(), "rank 1 of 2 did not join within startup_timeout_s=2") {
		t.Fatalf("init with a rank missing: %v", err)
	}
	select {
	case <-first.done:
	case <-time.After(deadline):
		t.Fatal("the rank that came still runs after its group failed")
	}
	gt.w.Close()
}

// A rank that announces the wrong platform, or devices the group does
// not get, fails init at once, naming it.
func TestGroupRankOfTheWrongKind(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--platform", "a5sim"}, "rank 0 (pid"},
		{[]string{"--devices", "1"}, "offers devices [1]; the group needs [0]"},
	} {
		gt := newGroupTest(t, engine.GroupSpec{Ranks: 1, Launcher: engine.LauncherNone}, engine.Config{StartupTimeout: 20 * time.Second})
		gt.start = func(addr, tokenFile string) { gt.startRank(addr, tokenFile, 0, nil, c.args...) }
		start := time.Now()
		err := gt.w.Init()
		if err == nil || engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v", c.args, err)
		}
		if c.args[0] == "--platform" && (err == nil || !strings.Contains(err.Error(), "announced platform a5sim; the group's is a2a3sim")) {
			t.Errorf("%v: %v", c.args, err)
		}
		if time.Since(start) > 10*time.Second {
			t.Errorf("%v: the refusal waited for the start-up bound", c.args)
		}
		gt.w.Close()
	}
}

// A rank with the wrong token is turned away (it says so and exits), the
// right one still joins; an impostor level-4 worker that does not know
// the token gets nothing from a rank that dials it (the proofs are
// mutual).
func TestGroupTokenProofs(t *testing.T) {
	gt := newGroupTest(t, engine.GroupSpec{Ranks: 1, Launcher: engine.LauncherNone}, engine.Config{})
	wrong := filepath.Join(t.TempDir(), "wrong.token")
	os.WriteFile(wrong, []byte("not-the-group-token-at-all\n"), 0o600)
	gt.start = func(addr, tokenFile string) {
		go func() { // the group accepts once OnListen has returned
			bad := gt.startRank(addr, wrong, 0, nil)
			<-bad.done
			if code := bad.cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(bad.stderr.String(), "refused this rank: ValueError: JOIN: the token proof does not match") {
				t.Errorf("a rank with the wrong token: exit %d, stderr %q", code, bad.stderr.String())
			}
			gt.startRank(addr, tokenFile, 0, nil)
		}()
	}
	gt.init()
	if err := gt.w.Close(); err != nil {
		t.Fatal(err)
	}

	// The impostor: it sends a CHALLENGE, reads the JOIN, answers with a
	// HELLO proved with another token.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tokFile := filepath.Join(t.TempDir(), "t.token")
	os.WriteFile(tokFile, []byte("the-rank-knows-this-token\n"), 0o600)
	rank := gt.startRank(ln.Addr().String(), tokFile, 0, nil)
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(deadline))
	wire.WriteMessage(c, wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeChallenge}, &wire.Challenge{}, nil)
	h, payload, err := wire.ReadFrame(c, wire.MaxJoin)
	if err != nil || h.Type != wire.TypeJoin {
		t.Fatalf("no JOIN: %v %v", h, err)
	}
	j, err := wire.DecodeJoin(payload)
	if err != nil || j.Host.Key != hostid.Local().Key {
		t.Fatalf("JOIN %+v: %v", j, err)
	}
	hello := &wire.Hello{Version: wire.ProtocolVersion, Parent: 1, Platform: "a2a3sim", DeviceIDs: []int{0}, CommProfile: "sim",
		Proof: wire.Prove([]byte("an-impostor-guesses-this"), j.Nonce, 5, 1)}
	wire.WriteMessage(c, wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeHello, Session: 5, Worker: 1}, hello, nil)
	h, payload, err = wire.ReadFrame(c, wire.TypeHelloReply.MaxPayload())
	if err != nil || h.Type != wire.TypeHelloReply {
		t.Fatalf("no HELLO_REPLY: %v %v", h, err)
	}
	r, err := wire.DecodeHelloReply(payload)
	if err != nil || r.Accepted || r.Err.Message != "HELLO: the token proof does not match" {
		t.Fatalf("the rank answered an impostor with %+v (%v)", r, err)
	}
	<-rank.done
	if code := rank.cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(rank.stderr.String(), "did not prove the token") {
		t.Errorf("the rank that met an impostor: exit %d, stderr %q", code, rank.stderr.String())
	}
	if h, _, err := wire.ReadFrame(c, 0); err == nil {
		t.Errorf("the rank sent a %s after refusing", h.Type)
	}
}
