package engine

import (
	"fmt"
	"os"
	"testing"

	"simpler/internal/leakcheck"
)

// TestMain fails the run when the tests leave shared-memory objects,
// goroutines, child processes or temporary files behind. Run as a child
// (process-mode tests start this binary again), it serves a mailbox.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runTestChild())
	}
	if os.Getenv(sessionEnv) != "" {
		os.Exit(runTestSession())
	}
	os.Exit(withRuntimeDir(func() int { return leakcheck.Run(m) }))
}

// withRuntimeDir runs f with XDG_RUNTIME_DIR set to a fresh private
// directory (daemons write their tokens there) and removes it after.
func withRuntimeDir(f func() int) int {
	dir, err := os.MkdirTemp("", "simpler-runtime-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Setenv("XDG_RUNTIME_DIR", dir)
	return f()
}
