package proc

import (
	"os"
	"testing"

	"simpler/internal/leakcheck"
)

// TestMain fails the run when the tests leave shared-memory objects,
// goroutines, child processes or temporary files behind. Run as a child
// (the tests' workers start this binary again), it serves a mailbox; run
// as an orphan's parent, it starts a worker and waits to be killed.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runTestChild())
	}
	if os.Getenv(orphanEnv) != "" {
		os.Exit(runOrphanParent())
	}
	leakcheck.Main(m)
}
