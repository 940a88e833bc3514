package engine

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/hal/dtype"
)

// deadline bounds every wait in these tests; nothing sleeps for a fixed
// time, so it only matters when something is broken.
const deadline = 10 * time.Second

var digestSeq atomic.Int64

// fn is a test callable. Each one gets a fresh digest, so tests never share
// a registration by accident.
type fn struct{ name, digest string }

func newFn(name string) fn {
	return fn{name: name, digest: fmt.Sprintf("sha256:test-%s-%d", name, digestSeq.Add(1))}
}

func (f fn) Name() string   { return f.name }
func (f fn) Digest() string { return f.digest }

type chipFn struct {
	fn
	run func(c *ChipCtx, a *TaskArgs) error
}

func (k *chipFn) RunChip(c *ChipCtx, a *TaskArgs) error { return k.run(c, a) }

type subFn struct {
	fn
	run func(c *SubCtx, a *TaskArgs) error
}

func (k *subFn) RunSub(c *SubCtx, a *TaskArgs) error { return k.run(c, a) }

type orchFn struct {
	fn
	run func(o *Orchestrator, a *TaskArgs, cfg *CallConfig) error
}

func (k *orchFn) RunOrch(o *Orchestrator, a *TaskArgs, cfg *CallConfig) error {
	return k.run(o, a, cfg)
}

func chipK(name string, run func(c *ChipCtx, a *TaskArgs) error) *chipFn {
	return &chipFn{newFn(name), run}
}

func subK(name string, run func(c *SubCtx, a *TaskArgs) error) *subFn {
	return &subFn{newFn(name), run}
}

func sim(t testing.TB) hal.Platform {
	t.Helper()
	p, err := hal.Lookup("a2a3sim")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newWorker makes and initialises a worker (level 3 on devices 0 and 1
// unless cfg says otherwise) that is closed when the test ends.
func newWorker(t *testing.T, cfg Config) *Worker {
	t.Helper()
	if cfg.Level == 0 {
		cfg.Level = 3
	}
	if cfg.Level == 3 && cfg.DeviceIDs == nil {
		cfg.DeviceIDs = []int{0, 1}
	}
	cfg.Platform = sim(t)
	w, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return w
}

func register(t *testing.T, w *Worker, c Callable, workers ...int) *Handle {
	t.Helper()
	h, err := w.Registry().Register(c, workers)
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
func hostI64(t *testing.T, sp *hostmem.Space, n int) (Tensor, []byte) {
	t.Helper()
	addr, mem, err := sp.Alloc(8 * n)
	if err != nil {
		t.Fatal(err)
	}
	return Tensor{Addr: addr, Shape: []int{n}, DType: dtype.Int64}, mem
}

// remoteTensor is a remote node's tensor for mkArgs: its shape and dtype,
// and where its bytes are.
type remoteTensor struct {
	Tensor
	ref RemoteRef
}

// mkArgs builds TaskArgs from Tensor, Tag pairs followed by uint64
// scalars.
func mkArgs(items ...any) *TaskArgs {
	a := &TaskArgs{}
	for i := 0; i < len(items); i++ {
		switch v := items[i].(type) {
		case Tensor:
			i++
			if err := a.AddTensor(v, items[i].(Tag)); err != nil {
				panic(err)
			}
		case remoteTensor:
			i++
			if err := a.AddRemote(v.Tensor, v.ref, items[i].(Tag)); err != nil {
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

// devBytes is a kernel's view of tensor i (always device memory).
func devBytes(c *ChipCtx, a *TaskArgs, i int) []byte {
	b, err := c.Chip.Bytes(a.Tensors[i].Addr, a.Tensors[i].NBytes())
	if err != nil {
		panic(err)
	}
	return b
}

// submitRun submits build and waits for the run with a deadline.
func submitRun(t *testing.T, w *Worker, build func(o *Orchestrator) error) error {
	t.Helper()
	r, err := w.Submit(asBuild(build))
	if err != nil {
		return err
	}
	err = r.Wait(deadline)
	if KindOf(err) == TimeoutError {
		t.Fatalf("run hung: %v", err)
	}
	return err
}

// asBuild adapts a test build to Worker.Submit's signature.
func asBuild(b func(o *Orchestrator) error) func(o *Orchestrator) (any, error) {
	return func(o *Orchestrator) (any, error) { return nil, b(o) }
}

func mustRun(t *testing.T, w *Worker, build func(o *Orchestrator) error) {
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
func buildErr(build func(o *Orchestrator)) func(o *Orchestrator) error {
	return func(o *Orchestrator) (err error) {
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

// recorder collects events from kernels running on several goroutines.
type recorder struct {
	mu  sync.Mutex
	evs []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, fmt.Sprintf(format, args...))
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.evs)
}

// await waits for ch to close, failing after the deadline.
func await(ch <-chan struct{}, what string) error {
	select {
	case <-ch:
		return nil
	case <-time.After(deadline):
		return fmt.Errorf("timed out waiting for %s", what)
	}
}

// until waits for cond to hold, failing after the deadline; kernels use
// it, since they cannot call t.Fatal.
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

// locked runs f under the worker's mutex, for white-box checks.
func locked[T any](w *Worker, f func() T) T {
	w.mu.Lock()
	defer w.mu.Unlock()
	return f()
}

func wantKind(t *testing.T, what string, err error, k Kind) {
	t.Helper()
	if err == nil || KindOf(err) != k {
		t.Errorf("%s: got error %v, want a %s", what, err, k)
	}
}
