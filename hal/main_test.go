package hal

import (
	"fmt"
	"os"
	"testing"

	"simpler/hal/shm"
)

// TestMain fails the run if any test left a shared-memory object behind.
func TestMain(m *testing.M) {
	code := m.Run()
	left, err := shm.Leftovers(shm.Prefix())
	if err != nil || len(left) > 0 {
		fmt.Fprintf(os.Stderr, "leaked shared memory: %v %v\n", left, err)
		code = 1
	}
	os.Exit(code)
}
