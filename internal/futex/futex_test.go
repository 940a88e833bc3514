package futex

import (
	"sync/atomic"
	"testing"
	"time"

	"simpler/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// A store seen while spinning returns at once, without a wake-up.
func TestSpinUntilSeesAStoreWhileSpinning(t *testing.T) {
	var w, flag uint32
	go func() {
		time.Sleep(100 * time.Microsecond)
		atomic.StoreUint32(&flag, 1) // no Signal: only the spin can see it soon
	}()
	start := time.Now()
	ok := SpinUntil(&w, nil, start.Add(10*time.Second), time.Second, func() bool { return atomic.LoadUint32(&flag) == 1 })
	if !ok {
		t.Fatal("SpinUntil gave up")
	}
	// Without the spin the store would be seen at the next MaxSleep tick at
	// best; a generous bound keeps a loaded machine from failing this.
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("took %v", d)
	}
}

// Past the spin it sleeps, and a Signal wakes it.
func TestSpinUntilSleepsAfterTheSpinAndWakes(t *testing.T) {
	var w, sleepers, flag uint32
	done := make(chan bool)
	go func() {
		done <- SpinUntil(&w, &sleepers, time.Now().Add(10*time.Second), 10*time.Microsecond, func() bool { return atomic.LoadUint32(&flag) == 1 })
	}()
	// Wait (bounded) until the waiter is counted as a sleeper: its spin is over.
	for deadline := time.Now().Add(5 * time.Second); atomic.LoadUint32(&sleepers) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never went to sleep")
		}
		time.Sleep(time.Millisecond)
	}
	atomic.StoreUint32(&flag, 1)
	Signal(&w, &sleepers)
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("woken waiter reported a timeout")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Signal did not wake the waiter")
	}
}

// A condition that never holds ends at the deadline, spin or not.
func TestSpinUntilEndsAtTheDeadline(t *testing.T) {
	var w uint32
	start := time.Now()
	if SpinUntil(&w, nil, start.Add(20*time.Millisecond), time.Second, func() bool { return false }) {
		t.Fatal("reported ready")
	}
	if d := time.Since(start); d < 20*time.Millisecond || d > 2*time.Second {
		t.Fatalf("returned after %v, want about 20ms", d)
	}
}

func TestSpinUntilAllocatesNothing(t *testing.T) {
	var w uint32
	flag := uint32(1)
	ready := func() bool { return atomic.LoadUint32(&flag) == 1 }
	deadline := time.Now().Add(time.Second)
	if n := testing.AllocsPerRun(100, func() { SpinUntil(&w, nil, deadline, time.Millisecond, ready) }); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
}
