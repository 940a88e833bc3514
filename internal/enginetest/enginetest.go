// Package enginetest holds the helpers that the tests of the engine's
// transports and roles (engine/proc, engine/remote, engine/global) share:
// workers brought up and closed, host tensors, task arguments, runs
// waited for under a deadline, polling. Only tests import
// it. Package engine's own tests keep a copy of their own: a package's
// internal tests cannot import a package that imports it.
package enginetest

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/hal/dtype"
)

// Deadline bounds every wait of these helpers; nothing sleeps for a fixed
// time, so it only matters when something is broken.
const Deadline = 10 * time.Second

// Sim is the default simulated platform.
func Sim(t testing.TB) hal.Platform {
	t.Helper()
	p, err := hal.Lookup("a2a3sim")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// NewSpace returns host shared memory closed when the test ends (after the
// workers made later, since cleanups run last-registered first).
func NewSpace(t testing.TB) *hostmem.Space {
	sp := hostmem.NewSpace()
	t.Cleanup(func() {
		if err := sp.Close(); err != nil {
			t.Errorf("space close: %v", err)
		}
	})
	return sp
}

// HostI64 is a host tensor of n int64 elements and its bytes.
func HostI64(t testing.TB, sp *hostmem.Space, n int) (engine.Tensor, []byte) {
	t.Helper()
	addr, mem, err := sp.Alloc(8 * n)
	if err != nil {
		t.Fatal(err)
	}
	return engine.Tensor{Addr: addr, Shape: []int{n}, DType: dtype.Int64}, mem
}

// Args builds TaskArgs from Tensor, Tag pairs followed by uint64
// scalars.
// RemoteTensor is a tensor of a remote node's task, for Args: its shape
// and dtype, and where its bytes are.
type RemoteTensor struct {
	engine.Tensor
	Ref engine.RemoteRef
}

func Args(items ...any) *engine.TaskArgs {
	a := &engine.TaskArgs{}
	for i := 0; i < len(items); i++ {
		switch v := items[i].(type) {
		case engine.Tensor:
			i++
			if err := a.AddTensor(v, items[i].(engine.Tag)); err != nil {
				panic(err)
			}
		case RemoteTensor:
			i++
			if err := a.AddRemote(v.Tensor, v.Ref, items[i].(engine.Tag)); err != nil {
				panic(err)
			}
		case uint64:
			a.AddScalar(v)
		default:
			panic(fmt.Sprintf("Args: %T", v))
		}
	}
	return a
}

func Get64(b []byte) int64    { return int64(binary.LittleEndian.Uint64(b)) }
func Put64(b []byte, v int64) { binary.LittleEndian.PutUint64(b, uint64(v)) }

// SubmitRun submits build and waits for the run with a Deadline.
func SubmitRun(t testing.TB, w *engine.Worker, build func(o *engine.Orchestrator) error) error {
	t.Helper()
	r, err := w.Submit(AsBuild(build))
	if err != nil {
		return err
	}
	err = r.Wait(Deadline)
	if engine.KindOf(err) == engine.TimeoutError {
		t.Fatalf("run hung: %v", err)
	}
	return err
}

// RunDone submits build and waits for the run to be done (at most 20 s),
// returning its error, which may itself be a TimeoutError.
func RunDone(t testing.TB, w *engine.Worker, build func(o *engine.Orchestrator) error) error {
	t.Helper()
	r, err := w.Submit(AsBuild(build))
	if err != nil {
		return err
	}
	err = r.Wait(20 * time.Second)
	if !r.Done() {
		t.Fatalf("run hung: %v", err)
	}
	return err
}

// AsBuild adapts a test build to Worker.Submit's signature.
func AsBuild(b func(o *engine.Orchestrator) error) func(o *engine.Orchestrator) (any, error) {
	return func(o *engine.Orchestrator) (any, error) { return nil, b(o) }
}

func MustRun(t testing.TB, w *engine.Worker, build func(o *engine.Orchestrator) error) {
	t.Helper()
	if err := SubmitRun(t, w, build); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// Must is for calls inside an orchestration function: the first error
// ends the build (BuildErr turns its panic into the build's error).
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// WantErrText requires err to contain text.
func WantErrText(t testing.TB, what string, err error, text string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), text) {
		t.Errorf("%s: error %v, want one saying %q", what, err, text)
	}
}

// Up initialises w (closing it if that fails) and closes it when the test
// ends; a close error is a failure unless it says one of tolerated.
func Up(t testing.TB, w *engine.Worker, tolerated ...string) *engine.Worker {
	t.Helper()
	if err := w.Init(); err != nil {
		w.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := w.Close()
		for _, text := range tolerated {
			if err != nil && strings.Contains(err.Error(), text) {
				return
			}
		}
		if err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return w
}

// BuildErr runs build, turning a Must panic into the build's error.
func BuildErr(build func(o *engine.Orchestrator)) func(o *engine.Orchestrator) error {
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

// Until waits for cond to hold, failing after the Deadline.
func Until(what string, cond func() bool) error {
	for end := time.Now().Add(Deadline); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			return fmt.Errorf("timed out waiting for %s", what)
		}
	}
	return nil
}

// Poll is Until for the test goroutine.
func Poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if err := Until(what, cond); err != nil {
		t.Fatal(err)
	}
}
