package remote

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/hal/dtype"
	"simpler/wire"
)

// The test kernels and helpers of package engine's tests that these tests
// use, copied: engine's are in its _test.go files, which another package
// cannot import. A session of these tests is this test binary again
// (sessionEnv), so the kernels it runs are these copies.

// deadline bounds every wait in these tests; nothing sleeps for a fixed
// time, so it only matters when something is broken.
const deadline = 10 * time.Second

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
	h, ok := o.Worker().Lookup(procKernel{strings.TrimPrefix(k.name, "node_")}.Digest())
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
	err := ServeSessionFD(func(wire.Bundle, uint64) (engine.Resolver, error) { return sessionResolver{}, nil })
	if err != nil {
		fmt.Fprintln(os.Stderr, "test session:", err)
		return 1
	}
	return 0
}

func sim(t testing.TB) hal.Platform {
	t.Helper()
	p, err := hal.Lookup("a2a3sim")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func register(t *testing.T, w *engine.Worker, c engine.Callable, workers ...int) *engine.Handle {
	t.Helper()
	h, err := w.Register(c, workers)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// newSpace returns host shared memory closed when the test ends (after the
// workers made later, since cleanups run last-registered first).
func newSpace(t *testing.T) *hostmem.Space {
	sp := hostmem.NewSpace()
	t.Cleanup(func() {
		if err := sp.Close(); err != nil {
			t.Errorf("space close: %v", err)
		}
	})
	return sp
}

// hostI64 is a host tensor of n int64 elements and its bytes.
func hostI64(t *testing.T, sp *hostmem.Space, n int) (engine.Tensor, []byte) {
	t.Helper()
	addr, mem, err := sp.Alloc(8 * n)
	if err != nil {
		t.Fatal(err)
	}
	return engine.Tensor{Addr: addr, Shape: []int{n}, DType: dtype.Int64}, mem
}

// mkArgs builds TaskArgs from Tensor, Tag pairs followed by uint64
// scalars.
func mkArgs(items ...any) *engine.TaskArgs {
	a := &engine.TaskArgs{}
	for i := 0; i < len(items); i++ {
		switch v := items[i].(type) {
		case engine.Tensor:
			i++
			if err := a.AddTensor(v, items[i].(engine.Tag)); err != nil {
				panic(err)
			}
		case uint64:
			a.AddScalar(v)
		default:
			panic(fmt.Sprintf("mkArgs: %T", v))
		}
	}
	return a
}

func get64(b []byte) int64    { return int64(binary.LittleEndian.Uint64(b)) }
func put64(b []byte, v int64) { binary.LittleEndian.PutUint64(b, uint64(v)) }

// submitRun submits build and waits for the run with a deadline.
func submitRun(t *testing.T, w *engine.Worker, build func(o *engine.Orchestrator) error) error {
	t.Helper()
	r, err := w.Submit(asBuild(build))
	if err != nil {
		return err
	}
	err = r.Wait(deadline)
	if engine.KindOf(err) == engine.TimeoutError {
		t.Fatalf("run hung: %v", err)
	}
	return err
}

// runDone submits build and waits for the run to be done (at most 20 s),
// returning its error, which may itself be a TimeoutError.
func runDone(t *testing.T, w *engine.Worker, build func(o *engine.Orchestrator) error) error {
	t.Helper()
	r, err := w.Submit(asBuild(build))
	if err != nil {
		return err
	}
	err = r.Wait(20 * time.Second)
	if !r.Done() {
		t.Fatalf("run hung: %v", err)
	}
	return err
}

// asBuild adapts a test build to Worker.Submit's signature.
func asBuild(b func(o *engine.Orchestrator) error) func(o *engine.Orchestrator) (any, error) {
	return func(o *engine.Orchestrator) (any, error) { return nil, b(o) }
}

func mustRun(t *testing.T, w *engine.Worker, build func(o *engine.Orchestrator) error) {
	t.Helper()
	if err := submitRun(t, w, build); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// must is for calls inside an orchestration function: the first error
// ends the build.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// buildErr runs build, turning a must() panic into the build's error.
func buildErr(build func(o *engine.Orchestrator)) func(o *engine.Orchestrator) error {
	return func(o *engine.Orchestrator) (err error) {
		defer func() {
			if p := recover(); p != nil {
				e, ok := p.(error)
				if !ok {
					panic(p)
				}
				err = e
			}
		}()
		build(o)
		return nil
	}
}

// until waits for cond to hold, failing after the deadline.
func until(what string, cond func() bool) error {
	for end := time.Now().Add(deadline); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			return fmt.Errorf("timed out waiting for %s", what)
		}
	}
	return nil
}

// poll is until for the test goroutine.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := until(what, cond); err != nil {
		t.Fatal(err)
	}
}
