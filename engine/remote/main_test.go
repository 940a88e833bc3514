package remote

import (
	"os"
	"testing"

	"simpler/internal/leakcheck"
)

// TestMain fails the run when the tests leave shared-memory objects,
// goroutines, child processes or temporary files behind. Run as a session
// process (the tests' daemons start this binary again), it serves the
// session on its inherited descriptors.
func TestMain(m *testing.M) {
	if os.Getenv(sessionEnv) != "" {
		os.Exit(runTestSession())
	}
	if os.Getenv(echoEnv) != "" {
		os.Exit(runEcho())
	}
	if os.Getenv(rankEnv) != "" {
		os.Exit(runTestRank(os.Args[1:]))
	}
	leakcheck.Main(m)
}
