package hal

import (
	"simpler/internal/leakcheck"
	"testing"
)

// TestMain fails the run if any test left a shared-memory object behind.
func TestMain(m *testing.M) { leakcheck.Main(m) }
