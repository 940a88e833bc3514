package core

import (
	"testing"

	"simpler/internal/leakcheck"
)

// TestMain fails the run when the tests leave anything behind; the core
// starts nothing, so this holds it to that.
func TestMain(m *testing.M) { leakcheck.Main(m) }
