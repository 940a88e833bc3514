package engine

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestSpinWaits: a polled receive gets a value sent while it polls and
// after it blocked, and sees a close; a polled done gives up after
// spinFor; and no more than spinCap waits poll at once.
func TestSpinWaits(t *testing.T) {
	ch := make(chan int, 1)
	go func() { ch <- 1 }()
	if v, ok := spinRecv(ch); v != 1 || !ok {
		t.Fatalf("got %d %v", v, ok)
	}
	go func() {
		time.Sleep(2 * spinFor) // past the poll: the receive has blocked
		ch <- 2
	}()
	if v, ok := spinRecv(ch); v != 2 || !ok {
		t.Fatalf("got %d %v", v, ok)
	}
	close(ch)
	if _, ok := spinRecv(ch); ok {
		t.Fatal("a closed channel received a value")
	}
	done := make(chan struct{})
	start := time.Now()
	if spinDone(done) {
		t.Fatal("an open channel reported done")
	}
	if d := time.Since(start); d < spinFor {
		t.Fatalf("gave up after %v, before spinFor", d)
	}
	close(done)
	if !spinDone(done) {
		t.Fatal("a closed channel not reported done")
	}

	// Hold every polling slot: a further wait does not poll.
	n := int(spinCap())
	if want := max(1, runtime.GOMAXPROCS(0)-1); n != want {
		t.Fatalf("spinCap %d, want %d", n, want)
	}
	for i := 0; i < n; i++ {
		if !spinSlot() {
			t.Fatalf("slot %d of %d refused", i, n)
		}
	}
	if spinSlot() {
		t.Fatal("a slot past spinCap was given")
	}
	if spinDone(make(chan struct{})) {
		t.Fatal("an open channel reported done")
	}
	spinners.Add(int32(-n))
	var wg sync.WaitGroup
	for i := 0; i < 4*n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spinDone(done)
		}()
	}
	wg.Wait()
	if got := spinners.Load(); got != 0 {
		t.Fatalf("%d slots still taken", got)
	}
}
