package engine

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestSpinWaits: a polled receive gets a value sent while it polls and
// after it blocked, and sees a close; a polled done gives up after
// spinFor; and endpoint waits and run waits poll within bounds of their
// own.
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
	if spinDone(done, &runPollers) {
		t.Fatal("an open channel reported done")
	}
	if d := time.Since(start); d < spinFor {
		t.Fatalf("gave up after %v, before spinFor", d)
	}
	close(done)
	if !spinDone(done, &runPollers) {
		t.Fatal("a closed channel not reported done")
	}

	// Every place taken: a further wait of that kind does not poll, while
	// the other kind still may; and the places all come back.
	n := int(endpointPollers.max)
	if want := max(1, runtime.GOMAXPROCS(0)-1); n != want || runPollers.max != 1 {
		t.Fatalf("places: %d for endpoints, %d for runs; want %d and 1", n, runPollers.max, want)
	}
	for i := 0; i < n; i++ {
		if !endpointPollers.take() {
			t.Fatalf("place %d of %d refused", i, n)
		}
	}
	if endpointPollers.take() {
		t.Fatal("an endpoint place past the bound was given")
	}
	if !runPollers.take() {
		t.Fatal("the run wait's place was taken by the endpoints")
	}
	start = time.Now()
	if spinDone(make(chan struct{}), &runPollers) || time.Since(start) >= spinFor {
		t.Fatal("a run wait polled with the run place taken")
	}
	runPollers.give()
	start = time.Now()
	if spinDone(make(chan struct{}), &runPollers) || time.Since(start) < spinFor {
		t.Fatal("a run wait did not poll with the endpoints' places taken")
	}
	for i := 0; i < n; i++ {
		endpointPollers.give()
	}
	var wg sync.WaitGroup
	runDone, member := make(chan struct{}), make(chan int)
	for i := 0; i < 4*n; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			spinDone(runDone, &runPollers)
		}()
		go func() {
			defer wg.Done()
			spinRecv(member)
		}()
	}
	time.Sleep(spinFor / 2)
	close(runDone)
	close(member)
	wg.Wait()
	if a, b := endpointPollers.n.Load(), runPollers.n.Load(); a != 0 || b != 0 {
		t.Fatalf("places still taken: %d endpoint, %d run", a, b)
	}
}

// TestRunWaitPlaces: a run wait polls in a place of its own only for the
// Worker a script drives with every member in this process; one with
// remote nodes, a child, and a Worker serving a parent poll in the
// endpoints' places.
func TestRunWaitPlaces(t *testing.T) {
	for _, c := range []struct {
		name                     string
		remote, attached, served bool
		want                     *pollers
	}{
		{"a script's worker", false, false, false, &runPollers},
		{"with remote nodes", true, false, false, &endpointPollers},
		{"a child", false, true, false, &endpointPollers},
		{"serving a parent", false, false, true, &endpointPollers},
	} {
		w := &Worker{attached: c.attached, cfg: Config{Served: c.served}}
		w.tree = tree{w: w, remoteNodes: c.remote}
		if got := w.tree.waitPlaces(); got != c.want {
			t.Errorf("%s: the run wait polls in the wrong places", c.name)
		}
	}
}
