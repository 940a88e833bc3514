package comm

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"simpler/internal/futex"
)

// With every rank in this process a waiter parks in Go, not on the
// futex: no thread sleeps in the kernel (the sleepers word stays 0), and
// Notify wakes it. Released, the registry forgets the header.
func TestWaitParksWhenEveryRankIsHere(t *testing.T) {
	clean(t)
	ranks, views := pair(t, 4096)
	if !views[1].wk.local() {
		t.Fatal("a domain whose ranks are all in this process is not seen as local")
	}
	res := make(chan error, 1)
	go func() {
		_, err := views[1].Wait(ranks[1].WindowBase, 8, 1, "==", 20*time.Second)
		res <- err
	}()
	eventually(t, "the waiter to park", func() bool { return views[1].wk.ranks[1].parked.Load() > 0 })
	if n := atomic.LoadUint32(futex.Word32(views[1].hdr, rankWord(1, rankSleepers))); n != 0 {
		t.Errorf("%d waiters sleep on the futex", n)
	}
	if err := views[0].Notify(1, ranks[0].Bases[1], 8, 1, "set"); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if n := views[1].wk.ranks[1].parked.Load(); n != 0 {
		t.Errorf("%d waiters still counted parked", n)
	}
	releaseAll(t, ranks)
	if n := wakeLen(); n != 0 {
		t.Errorf("%d headers in the wake registry after the release", n)
	}
}

// A domain with a rank this process does not host keeps the futex path
// (a notifier elsewhere can only wake a kernel sleeper), and a Notify
// from here still wakes it.
func TestWaitSleepsOnFutexWhenARankIsElsewhere(t *testing.T) {
	clean(t)
	ranks, views := pair(t, 4096)
	h := views[1].wk
	h.hosted.Add(-1) // as if rank 0 were in another process
	t.Cleanup(func() { h.hosted.Add(1) })
	if h.local() {
		t.Fatal("local with a rank elsewhere")
	}
	res := make(chan error, 1)
	go func() {
		_, err := views[1].Wait(ranks[1].WindowBase, 8, 1, "==", 20*time.Second)
		res <- err
	}()
	eventually(t, "the waiter to sleep on the futex", func() bool {
		return atomic.LoadUint32(futex.Word32(views[1].hdr, rankWord(1, rankSleepers))) > 0
	})
	if err := views[0].Notify(1, ranks[0].Bases[1], 8, 1, "set"); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}

// Ping-pong over parked waiters: no wake-up is lost. Each hand-off must
// come from a wake, not from the bounded park's re-check: the whole run
// must take far less than one futex.MaxSleep per hand-off.
func TestParkedPingPong(t *testing.T) {
	clean(t)
	ranks, views := pair(t, 4096)
	const rounds = 2000
	var wg sync.WaitGroup
	errs := make([]error, 2)
	start := time.Now()
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			peer := 1 - r
			for i := 1; i <= rounds; i++ {
				want := int64(i) // rank 1 waits for rank 0's i-th notify
				if r == 0 {
					want = int64(i - 1) // rank 0 goes first
				}
				if want > 0 {
					if _, err := views[r].Wait(ranks[r].WindowBase, 8, want, ">=", 20*time.Second); err != nil {
						errs[r] = err
						return
					}
				}
				if err := views[r].Notify(peer, ranks[r].Bases[peer], 8, 1, "add"); err != nil {
					errs[r] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > rounds*futex.MaxSleep/4 {
		t.Errorf("%d hand-offs took %v: wake-ups are being lost", 2*rounds, d)
	}
}
