package comm

import (
	"sync/atomic"
	"testing"
	"time"

	"simpler/internal/futex"
	"simpler/internal/halt"
)

// stopBound is how soon after its stop a blocked call must return.
const stopBound = time.Second

// stopWhen fires s with reason once ready holds, and returns when it did.
func stopWhen(t *testing.T, what string, ready func() bool, s *halt.Signal, reason string) time.Time {
	t.Helper()
	eventually(t, what, ready)
	at := time.Now()
	s.Stop(reason)
	return at
}

// A wait parked in Go (every rank in this process) and one asleep on the
// futex (a rank elsewhere, as in process mode) both end on the stop
// signal, with its reason's kind, long before their own timeout; the
// same signal, Reset, serves the next wait, which a Notify ends as ever.
func TestWaitStopEndsABlockedWait(t *testing.T) {
	clean(t)
	for _, path := range []string{"parked", "futex"} {
		t.Run(path, func(t *testing.T) {
			ranks, views := pair(t, 4096)
			v := views[1]
			asleep := func() bool { return v.wk.ranks[1].parked.Load() == 1 }
			if path == "futex" {
				v.wk = nil // as a view of a domain with a rank in another process
				sleepers := futex.Word32(v.hdr, rankWord(1, rankSleepers))
				asleep = func() bool { return atomic.LoadUint32(sleepers) == 1 }
			}
			word := ranks[1].WindowBase + 8
			var s halt.Signal
			done := make(chan error, 1)
			go func() {
				_, err := v.WaitStop(word, 8, 1, "==", 120*time.Second, &s)
				done <- err
			}()
			at := stopWhen(t, "the wait to sleep", asleep, &s, "TimeoutError: past its deadline of 1s")
			select {
			case err := <-done:
				wantErr(t, err, `TimeoutError: comm.wait on domain "test" rank 1: stopped: past its deadline of 1s`)
				if took := time.Since(at); took > stopBound {
					t.Errorf("the wait returned %v after its stop", took)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the wait did not return on its stop")
			}
			// A stopped signal ends a wait that starts after it, unless its
			// condition already holds.
			if _, err := v.WaitStop(word, 8, 1, "==", 120*time.Second, &s); err == nil {
				t.Error("a wait under a stopped signal did not end")
			}
			if got, err := v.WaitStop(word, 8, 0, "==", 120*time.Second, &s); got != 0 || err != nil {
				t.Errorf("a wait whose condition holds: %d, %v", got, err)
			}
			s.Reset()
			go func() {
				_, err := v.WaitStop(word, 8, 7, "==", 120*time.Second, &s)
				done <- err
			}()
			eventually(t, "the second wait to sleep", asleep)
			if err := views[0].Notify(1, ranks[0].Bases[1]+8, 8, 7, "set"); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Errorf("after Reset, a notified wait: %v", err)
			}
		})
	}
}

// A rank stopped in a barrier says why, withdraws its arrival as a rank
// that timed out does, and the barrier still completes when every rank
// calls again.
func TestBarrierStopWithdraws(t *testing.T) {
	clean(t)
	_, views := pair(t, 4096)
	w := futex.Word32(views[0].hdr, hdrBarrier)
	var s halt.Signal
	done := make(chan error, 1)
	go func() { done <- views[0].BarrierStop(120*time.Second, &s) }()
	at := stopWhen(t, "rank 0 to arrive", func() bool { return atomic.LoadUint32(w)&0xffff == 1 }, &s, "RuntimeError: run 3 cancelled")
	select {
	case err := <-done:
		wantErr(t, err, `RuntimeError: comm.barrier on domain "test" rank 0: stopped: run 3 cancelled`)
		if took := time.Since(at); took > stopBound {
			t.Errorf("the barrier returned %v after its stop", took)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the barrier did not return on its stop")
	}
	if x := atomic.LoadUint32(w); x != 0 {
		t.Errorf("barrier word %#x after the stopped rank left, want none arrived", x)
	}
	go func() { done <- views[0].Barrier(20 * time.Second) }()
	if err := views[1].Barrier(20 * time.Second); err != nil {
		t.Error(err)
	}
	if err := <-done; err != nil {
		t.Error(err)
	}
}
