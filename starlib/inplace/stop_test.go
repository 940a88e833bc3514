package inplace

import (
	"testing"

	"simpler/hal/dtype"
	"simpler/internal/halt"
	"simpler/kind"
)

// A reduction under a stopped signal returns the stop's error within
// stopEvery blocks; under one that has not fired it reduces as Reduce.
func TestReduceStopEndsEarly(t *testing.T) {
	n := 4 * stopEvery * blockBytes
	a, b, d := make([]byte, n), make([]byte, n), make([]byte, n)
	for i := range a {
		a[i], b[i] = 1, 2
	}
	var s halt.Signal
	if err := ReduceStop(dtype.UInt8, Sum, [][]byte{d}, [][]byte{a, b}, &s); err != nil {
		t.Fatal(err)
	}
	if d[n-1] != 3 {
		t.Fatalf("an unstopped reduction wrote %d, want 3", d[n-1])
	}
	clear(d)
	s.Stop("RuntimeError: run 2 cancelled")
	err := ReduceStop(dtype.UInt8, Sum, [][]byte{d}, [][]byte{a, b}, &s)
	if kind.Of(err) != kind.RuntimeError || err.Error() != "RuntimeError: inplace: stopped: run 2 cancelled" {
		t.Errorf("a stopped reduction: %v", err)
	}
	if d[stopEvery*blockBytes] != 0 {
		t.Error("a stopped reduction went on past its first poll")
	}
}
