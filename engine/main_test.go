package engine

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"simpler/hal/shm"
)

// TestMain fails the run when the tests leave shared-memory objects or
// goroutines (endpoints, timers, kernels) behind.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runTestChild())
	}
	start := runtime.NumGoroutine()
	code := m.Run()

	if left, err := shm.Leftovers(shm.Prefix()); err != nil || len(left) > 0 {
		fmt.Fprintf(os.Stderr, "LEAK: shared-memory objects left behind: %v (err %v)\n", left, err)
		code = 1
	}

	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(2 * time.Second); n > start && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	if n > start {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		fmt.Fprintf(os.Stderr, "LEAK: %d goroutines at exit, %d at start; all stacks:\n%s\n", n, start, buf)
		code = 1
	}
	os.Exit(code)
}
