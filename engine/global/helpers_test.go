package global

import (
	"strings"
	"testing"
	"time"

	"simpler/engine"
	"simpler/hal"
	"simpler/internal/leakcheck"
)

// TestMain fails the run when the tests leave shared-memory objects,
// goroutines or temporary files behind. (Global domains over child
// processes and remote sessions are engine/proc's and engine/remote's
// tests.)
func TestMain(m *testing.M) { leakcheck.Main(m) }

// deadline bounds every wait in these tests; nothing sleeps for a fixed
// time.
const deadline = 10 * time.Second

func sim(t testing.TB) hal.Platform {
	t.Helper()
	p, err := hal.Lookup("a2a3sim")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newNode makes and initialises a level-3 worker (on devices 0 and 1
// unless cfg says otherwise) that is closed when the test ends.
func newNode(t *testing.T, cfg engine.Config) *engine.Worker {
	t.Helper()
	cfg.Level, cfg.Platform = 3, sim(t)
	if cfg.DeviceIDs == nil {
		cfg.DeviceIDs = []int{0, 1}
	}
	w, err := engine.NewWorker(cfg)
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

func wantErrText(t *testing.T, what string, err error, text string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), text) {
		t.Errorf("%s: error %v, want one saying %q", what, err, text)
	}
}
