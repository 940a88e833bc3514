package orphan

import (
	"os"
	"testing"
	"time"

	"simpler/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// A signal runs stop once; ending the watch first runs nothing.
func TestWatch(t *testing.T) {
	sig := make(chan os.Signal, 1)
	stopped := make(chan struct{})
	end := Watch(sig, func() { close(stopped) })
	select {
	case <-stopped:
		t.Fatal("stopped with the parent alive and no signal")
	case <-time.After(3 * pollEvery):
	}
	end()
	end() // twice is fine
	sig <- os.Interrupt
	select {
	case <-stopped:
		t.Fatal("stopped after the watch ended")
	case <-time.After(3 * pollEvery):
	}
}
