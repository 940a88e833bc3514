package global

import (
	"testing"

	"simpler/engine"
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

// sim is the default simulated platform.
var sim = enginetest.Sim

// l4Tree is a level-4 worker over level-3 sim nodes in this process, as
// nodes configure them (level and platform set here), not yet initialised.
func l4Tree(t *testing.T, nodes []engine.Config) *engine.Worker {
	t.Helper()
	w, err := engine.NewWorker(engine.Config{Level: 4, Platform: sim(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range nodes {
		cfg.Level, cfg.Platform = 3, sim(t)
		c, err := engine.NewWorker(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.AddWorker(c); err != nil {
			t.Fatal(err)
		}
	}
	return w
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
	return enginetest.Up(t, w)
}

// The helpers shared with engine/proc's and engine/remote's tests
// (internal/enginetest).
var (
	submitRun   = enginetest.SubmitRun
	asBuild     = enginetest.AsBuild
	mustRun     = enginetest.MustRun
	buildErr    = enginetest.BuildErr
	wantErrText = enginetest.WantErrText
)
