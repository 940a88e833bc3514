package global

import (
	"strings"
	"testing"

	"simpler/engine"
	"simpler/hal"
	"simpler/internal/enginetest"
	"simpler/internal/leakcheck"
)

// TestMain fails the run when the tests leave shared-memory objects,
// goroutines or temporary files behind. (Global domains over child
// processes and remote sessions are engine/proc's and engine/remote's
// tests.)
func TestMain(m *testing.M) { leakcheck.Main(m) }

// deadline bounds every wait in these tests; nothing sleeps for a fixed
// time.
const deadline = enginetest.Deadline

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

// The helpers shared with engine/proc's and engine/remote's tests
// (internal/enginetest).
var (
	submitRun = enginetest.SubmitRun
	asBuild   = enginetest.AsBuild
	mustRun   = enginetest.MustRun
	buildErr  = enginetest.BuildErr
)

// must is for calls inside an orchestration function: the first error
// ends the build.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func wantErrText(t *testing.T, what string, err error, text string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), text) {
		t.Errorf("%s: error %v, want one saying %q", what, err, text)
	}
}
