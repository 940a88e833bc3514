package hostmem

import (
	"reflect"
	"testing"
)

// The free list is stepped directly: each step's spans are what first fit
// with coalescing must leave.
func TestFreeListSteps(t *testing.T) {
	f := newFreeList(1024)
	take := func(n, want int) {
		t.Helper()
		off, ok := f.take(n)
		if !ok || off != want {
			t.Fatalf("take(%d) = %d, %v; want %d", n, off, ok, want)
		}
	}
	expect := func(want ...span) {
		t.Helper()
		if len(f.spans) != len(want) || (len(want) > 0 && !reflect.DeepEqual(f.spans, want)) {
			t.Fatalf("spans %v, want %v", f.spans, want)
		}
	}
	take(64, 0)
	take(128, 64)
	take(64, 192)
	expect(span{256, 768})
	f.give(64, 128) // a hole between two live runs
	expect(span{64, 128}, span{256, 768})
	take(64, 64) // first fit: the hole, not the tail
	expect(span{128, 64}, span{256, 768})
	if _, ok := f.take(800); ok {
		t.Fatal("take(800) found room in 832 free bytes split in two")
	}
	f.give(192, 64) // joins the hole on its left and the tail on its right
	expect(span{128, 896})
	f.give(0, 64) // 64 is still live: no neighbour to join
	expect(span{0, 64}, span{128, 896})
	if f.empty() || f.free() != 960 {
		t.Fatalf("empty %v, free %d; want false, 960", f.empty(), f.free())
	}
	f.give(64, 64) // the last live run: one span again
	expect(span{0, 1024})
	if !f.empty() {
		t.Fatal("a list with every run given back is not empty")
	}
	take(1024, 0)
	expect()
	if _, ok := f.take(64); ok {
		t.Fatal("take from a full chunk succeeded")
	}
	f.give(0, 1024)
	expect(span{0, 1024})
}
