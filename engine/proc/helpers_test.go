package proc

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/internal/enginetest"
)

// The test kernels and helpers of package engine's tests that these tests
// use, copied: engine's are in its _test.go files, which another package
// cannot import. A child process of these tests is this test binary again
// (childEnv), so the kernels it runs are these copies.

// childEnv makes this test binary a child: TestMain serves the mailbox
// named by the last argument, resolving callables from procKernels by
// name.
const childEnv = "SIMPLER_PROC_TEST_CHILD"

// deadline bounds every wait in these tests; nothing sleeps for a fixed
// time, so it only matters when something is broken.
const deadline = enginetest.Deadline

// procKernel is a Go callable a child process can find by name.
type procKernel struct{ name string }

func (k procKernel) Name() string   { return k.name }
func (k procKernel) Digest() string { return "sha256:test-" + k.name }
func (k procKernel) Module() string { return "proc_test" }

func (k procKernel) RunChip(c *engine.ChipCtx, a *engine.TaskArgs) error {
	return procKernels[k.name](a, c, c.Stop)
}
func (k procKernel) RunSub(c *engine.SubCtx, a *engine.TaskArgs) error {
	return procKernels[k.name](a, nil, c.Stop)
}

var procKernels = map[string]func(a *engine.TaskArgs, c *engine.ChipCtx, stop *engine.Stopper) error{
	// add1 adds one to the int64 in tensor 0, in place.
	"add1": func(a *engine.TaskArgs, c *engine.ChipCtx, stop *engine.Stopper) error {
		b := taskBytes(a, c, 0)
		binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(b)+1)
		return nil
	},
	// hang marks tensor 0 and then never returns.
	"hang": func(a *engine.TaskArgs, c *engine.ChipCtx, stop *engine.Stopper) error {
		binary.LittleEndian.PutUint64(taskBytes(a, c, 0), 1)
		select {}
	},
	"noop": func(a *engine.TaskArgs, c *engine.ChipCtx, stop *engine.Stopper) error { return nil },
	// spin marks tensor 0 and runs until it is asked to stop.
	"spin": func(a *engine.TaskArgs, c *engine.ChipCtx, stop *engine.Stopper) error {
		binary.LittleEndian.PutUint64(taskBytes(a, c, 0), 1)
		for {
			if stopped, why := stop.Stopped(); stopped {
				return engine.Errorf(engine.RuntimeError, "stopped: %s", why)
			}
			time.Sleep(time.Millisecond)
		}
	},
	"fail": func(a *engine.TaskArgs, c *engine.ChipCtx, stop *engine.Stopper) error {
		return engine.Errorf(engine.IndexError, "child says no")
	},
	// hostalloc makes 64 bytes of host memory in the child and keeps
	// them, as a Starlark kernel's host_tensor() does: from the space of
	// the child's resolver (kernelSpace), which only that resolver's
	// Close gives back.
	"hostalloc": func(a *engine.TaskArgs, c *engine.ChipCtx, stop *engine.Stopper) error {
		kernelSpace.Lock()
		defer kernelSpace.Unlock()
		if kernelSpace.sp == nil {
			kernelSpace.sp = hostmem.NewSpace()
		}
		_, _, err := kernelSpace.sp.Alloc(64)
		return err
	},
}

// kernelSpace is the host memory kernels made in this child process:
// a Starlark child's resolver session holds it the same way.
var kernelSpace struct {
	sync.Mutex
	sp *hostmem.Space
}

// taskBytes is tensor i's memory in a chip kernel (device) or SUB (host).
func taskBytes(a *engine.TaskArgs, c *engine.ChipCtx, i int) []byte {
	t := a.Tensors[i]
	if c != nil {
		b, err := c.Chip.Bytes(t.Addr, t.NBytes())
		if err != nil {
			panic(err)
		}
		return b
	}
	b, err := hostmem.Resolve(t.Addr, t.NBytes())
	if err != nil {
		panic(err)
	}
	return b
}

type testResolver struct{}

// Close gives back the host memory the child's kernels made, as a
// Starlark resolver's Close closes its session.
func (testResolver) Close() error {
	kernelSpace.Lock()
	defer kernelSpace.Unlock()
	if kernelSpace.sp == nil {
		return nil
	}
	return kernelSpace.sp.Close()
}

func (testResolver) Resolve(digest, module, name string) (engine.Callable, error) {
	k := procKernel{name}
	if _, ok := procKernels[name]; !ok || k.Digest() != digest {
		return nil, fmt.Errorf("RuntimeError: no test kernel %s (%s)", name, digest)
	}
	return k, nil
}

func runTestChild() int {
	if err := RunChild(os.Args[len(os.Args)-1], func([]byte) (engine.Resolver, error) { return testResolver{}, nil }); err != nil {
		fmt.Fprintln(os.Stderr, "test child:", err)
		return 1
	}
	return 0
}

// testLauncher starts child processes of this test binary.
func testLauncher() *engine.Launcher {
	exe, _ := os.Executable()
	return &engine.Launcher{Path: exe, Env: []string{childEnv + "=1"}}
}

// spawnLog is a Spawner that records the processes it started, by name,
// so that a test can reach them: kill one, stop one, read its pid.
type spawnLog struct {
	mu    sync.Mutex
	procs []*process
}

func (l *spawnLog) add(p *process) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.procs = append(l.procs, p)
}

func (l *spawnLog) SpawnChip(req engine.SpawnRequest) (engine.ChipProcess, error) {
	p, err := Spawner{}.SpawnChip(req)
	if err == nil {
		l.add(p.(*chipProcess).process)
	}
	return p, err
}

func (l *spawnLog) SpawnSub(req engine.SpawnRequest) (engine.Process, error) {
	p, err := Spawner{}.SpawnSub(req)
	if err == nil {
		l.add(p.(*process))
	}
	return p, err
}

func (l *spawnLog) SpawnNode(req engine.SpawnRequest) (engine.NodeProcess, error) {
	p, err := Spawner{}.SpawnNode(req)
	if err == nil {
		l.add(p.(nodeProcess).process)
	}
	return p, err
}

// all is every process started, in the order they answered.
func (l *spawnLog) all() []*process {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*process(nil), l.procs...)
}

// lookup is the process named name ("chip_worker 0 (device 0)"), or nil.
func (l *spawnLog) lookup(name string) *process {
	for _, p := range l.all() {
		if p.name == name {
			return p
		}
	}
	return nil
}

// get is lookup for the test goroutine: the process must exist.
func (l *spawnLog) get(t *testing.T, name string) *process {
	t.Helper()
	p := l.lookup(name)
	if p == nil {
		t.Fatalf("no process %q was started", name)
	}
	return p
}

// sim is the default simulated platform.
var sim = enginetest.Sim

// newWorker makes and initialises a process-mode worker (level 3 on
// devices 0 and 1 unless cfg says otherwise) whose children are this test
// binary, and closes it when the test ends.
func newWorker(t *testing.T, cfg engine.Config) *engine.Worker {
	t.Helper()
	if cfg.Level == 0 {
		cfg.Level = 3
	}
	if cfg.Level == 3 && cfg.DeviceIDs == nil {
		cfg.DeviceIDs = []int{0, 1}
	}
	processMode(&cfg)
	w, err := engine.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return enginetest.Up(t, w)
}

// processMode fills in what process mode needs that cfg leaves out: the
// mode, the platform, this test binary as the launcher, the Spawner.
func processMode(cfg *engine.Config) {
	if cfg.Mode == "" {
		cfg.Mode = "process"
	}
	if cfg.Platform == nil {
		cfg.Platform, _ = hal.Lookup("a2a3sim")
	}
	if cfg.Launcher == nil {
		cfg.Launcher = testLauncher()
	}
	if cfg.Spawn == nil {
		cfg.Spawn = Spawner{}
	}
}

// procWorker is a process-mode level-3 worker of chips chips and subs
// SUB workers, and the log of its processes.
func procWorker(t *testing.T, chips, subs int) (*engine.Worker, *spawnLog) {
	t.Helper()
	ids := make([]int, chips)
	for i := range ids {
		ids[i] = i
	}
	log := &spawnLog{}
	return newWorker(t, engine.Config{DeviceIDs: ids, NumSubWorkers: subs, Spawn: log}), log
}

func register(t *testing.T, w *engine.Worker, c engine.Callable, workers ...int) *engine.Handle {
	t.Helper()
	h, err := w.Registry().Register(c, workers)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func kernel(t *testing.T, w *engine.Worker, name string) *engine.Handle {
	h, ok := w.Registry().Lookup(procKernel{name}.Digest())
	if !ok {
		t.Fatalf("%s not registered", name)
	}
	return h
}

// The helpers shared with engine/remote's tests (internal/enginetest).
var (
	newSpace    = enginetest.NewSpace
	hostI64     = enginetest.HostI64
	mkArgs      = enginetest.Args
	get64       = enginetest.Get64
	put64       = enginetest.Put64
	submitRun   = enginetest.SubmitRun
	runDone     = enginetest.RunDone
	asBuild     = enginetest.AsBuild
	mustRun     = enginetest.MustRun
	buildErr    = enginetest.BuildErr
	until       = enginetest.Until
	poll        = enginetest.Poll
	wantErrText = enginetest.WantErrText
)

// wantKindText requires err to be of kind k with a message containing text.
func wantKindText(t *testing.T, what string, err error, k engine.Kind, text string) {
	t.Helper()
	if err == nil || engine.KindOf(err) != k || !strings.Contains(err.Error(), text) {
		t.Errorf("%s: got %v, want a %s containing %q", what, err, k, text)
	}
}
