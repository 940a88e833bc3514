package remote

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"simpler/engine"
	"simpler/internal/enginetest"
	"simpler/wire"
)

// The test kernels and helpers of package engine's tests that these tests
// use, copied: engine's are in its _test.go files, which another package
// cannot import. A session of these tests is this test binary again
// (sessionEnv), so the kernels it runs are these copies.

// deadline bounds every wait in these tests; nothing sleeps for a fixed
// time, so it only matters when something is broken.
const deadline = enginetest.Deadline

// procKernel is a Go chip kernel a session finds by name.
type procKernel struct{ name string }

func (k procKernel) Name() string   { return k.name }
func (k procKernel) Digest() string { return "sha256:test-" + k.name }
func (k procKernel) Module() string { return "remote_test" }

func (k procKernel) RunChip(c *engine.ChipCtx, a *engine.TaskArgs) error {
	return procKernels[k.name](a, c, c.Stop)
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
}

// taskBytes is tensor i's memory in a chip kernel (the chip's device
// memory, where a level-3 node stages a task's tensors).
func taskBytes(a *engine.TaskArgs, c *engine.ChipCtx, i int) []byte {
	t := a.Tensors[i]
	b, err := c.Chip.Bytes(t.Addr, t.NBytes())
	if err != nil {
		panic(err)
	}
	return b
}

type testResolver struct{}

func (testResolver) Resolve(digest, module, name string) (engine.Callable, error) {
	k := procKernel{name}
	if _, ok := procKernels[name]; !ok || k.Digest() != digest {
		return nil, fmt.Errorf("RuntimeError: no test kernel %s (%s)", name, digest)
	}
	return k, nil
}

// nodeOrch is an orchestration callable a remote node runs: it submits
// the named kernel on chip 0 with the node's args.
type nodeOrch struct{ procKernel }

func (k nodeOrch) RunOrch(o *engine.Orchestrator, a *engine.TaskArgs, cfg *engine.CallConfig) error {
	if k.name == "node_noop" {
		return nil // submits nothing: the cost of a remote task itself
	}
	if run := nodeOrchRuns[k.name]; run != nil {
		return run(o, a)
	}
	h, ok := o.Worker().Registry().Lookup(procKernel{strings.TrimPrefix(k.name, "node_")}.Digest())
	if !ok {
		return engine.Errorf(engine.ValueError, "kernel for %s not registered on the node", k.name)
	}
	_, err := o.SubmitNext(h, a, nil, 0)
	return err
}

type sessionResolver struct{}

func (sessionResolver) Resolve(digest, module, name string) (engine.Callable, error) {
	if k, ok := strings.CutPrefix(name, "node_"); ok {
		c := nodeOrch{procKernel{name}}
		if _, found := procKernels[k]; found && c.Digest() == digest {
			return c, nil
		}
	}
	return testResolver{}.Resolve(digest, module, name)
}

func runTestSession() int {
	err := ServeSessionFD(func(wire.Bundle, uint64) (engine.Resolver, error) { return sessionResolver{}, nil }, os.Getenv(sessionRaceEnv) != "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "test session:", err)
		return 1
	}
	return 0
}

// sim is the default simulated platform.
var sim = enginetest.Sim

func register(t *testing.T, w *engine.Worker, c engine.Callable, workers ...int) *engine.Handle {
	t.Helper()
	h, err := w.Registry().Register(c, workers)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The helpers shared with engine/proc's tests (internal/enginetest).
// remoteTensor is a remote node's tensor for mkArgs.
type remoteTensor = enginetest.RemoteTensor

var (
	newSpace  = enginetest.NewSpace
	hostI64   = enginetest.HostI64
	mkArgs    = enginetest.Args
	get64     = enginetest.Get64
	put64     = enginetest.Put64
	submitRun = enginetest.SubmitRun
	runDone   = enginetest.RunDone
	asBuild   = enginetest.AsBuild
	mustRun   = enginetest.MustRun
	buildErr  = enginetest.BuildErr
	until     = enginetest.Until
	poll      = enginetest.Poll
)

// outside is w's remote-buffer calls outside any run.
func outside(w *engine.Worker) Direct { return DirectIn(w.DirectIn(nil)) }
