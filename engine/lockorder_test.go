package engine

import (
	"strings"
	"testing"

	"simpler/internal/lockorder"
)

// TestWorkerLockOrderIsChecked checks that a Worker's locks carry their
// ranks, so that every -race test run checks the order the package doc
// states: taking regMu while holding mu panics, naming both.
func TestWorkerLockOrderIsChecked(t *testing.T) {
	w := newWorker(t, Config{})
	var msg string
	func() {
		defer func() {
			if r := recover(); r != nil {
				msg, _ = r.(string)
			}
		}()
		w.mu.Lock()
		defer w.mu.Unlock()
		w.regMu.Lock() // the wrong order
		w.regMu.Unlock()
	}()
	switch {
	case lockorder.Enabled && !strings.Contains(msg, "Worker.regMu (rank 10) taken while holding Worker.mu (rank 30)"):
		t.Fatalf("regMu under mu gave %q", msg)
	case !lockorder.Enabled && msg != "":
		t.Fatalf("a build without the checks panicked: %s", msg)
	}
}
