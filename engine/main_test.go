package engine

import (
	"testing"

	"simpler/internal/leakcheck"
)

// TestMain fails the run when the tests leave shared-memory objects,
// goroutines, child processes or temporary files behind. (Child
// processes are engine/proc's tests' own, remote sessions
// engine/remote's.)
func TestMain(m *testing.M) { leakcheck.Main(m) }
