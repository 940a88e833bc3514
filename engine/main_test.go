package engine

import (
	"os"
	"testing"

	"simpler/internal/leakcheck"
)

// TestMain fails the run when the tests leave shared-memory objects,
// goroutines, child processes or temporary files behind. Run as a child
// (process-mode tests start this binary again), it serves a mailbox.
// (Remote sessions are engine/remote's tests' own.)
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runTestChild())
	}
	if os.Getenv(orphanEnv) != "" {
		os.Exit(runOrphanParent())
	}
	leakcheck.Main(m)
}
