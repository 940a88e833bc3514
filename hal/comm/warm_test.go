package comm

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"simpler/hal"
	"simpler/hal/shm"
	"simpler/internal/futex"
	"simpler/kind"
)

func warmReq(n, size int, ns string) Request {
	r := newReq(n, size)
	r.Namespace = ns
	return r
}

// reuseAll takes a slot back rank by rank on one goroutine: there is no
// rendezvous, so nothing waits for a peer.
func reuseAll(t *testing.T, req Request, chips []hal.Chip) []*Rank {
	t.Helper()
	ranks := make([]*Rank, req.Ranks)
	for r := range ranks {
		rk, err := Allocate(req, r, chips[r])
		if err != nil {
			releaseAll(t, ranks)
			t.Fatalf("rank %d: %v", r, err)
		}
		ranks[r] = rk
	}
	return ranks
}

// namedObjects lists the shm objects of this process whose name holds s.
func namedObjects(t *testing.T, s string) []string {
	t.Helper()
	left, err := shm.Leftovers(shm.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range left {
		if strings.Contains(name, s) {
			out = append(out, name)
		}
	}
	return out
}

func TestSlotOf(t *testing.T) {
	for _, c := range []struct {
		ns, slot, gen string
		reuse, ok     bool
	}{
		{"w3~2.5", "w3~2", "w3~2.5", false, true},
		{"w3~2.5+", "w3~2", "w3~2.5", true, true},
		{"w3", "", "", false, false},
		{"w3~2", "", "", false, false},
		{"w3~x.5", "", "", false, false},
		{"~2.5", "", "", false, false},
		{"w3~2.", "", "", false, false},
	} {
		slot, gen, reuse, ok := slotOf(c.ns)
		if slot != c.slot || gen != c.gen || reuse != c.reuse || ok != c.ok {
			t.Errorf("slotOf(%q) = %q %q %v %v", c.ns, slot, gen, reuse, ok)
		}
	}
	if got := WarmNamespace("w3", 2, 5, true); got != "w3~2.5+" {
		t.Errorf("WarmNamespace: %q", got)
	}
}

// TestWarmSlotTakesTheRanksBack: released ranks of a slot park, leaving
// no name behind; the next allocation of the slot takes them back one by
// one without a rendezvous, with the new id and name, a zero window and
// every peer still reachable; a stale generation is torn down.
func TestWarmSlotTakesTheRanksBack(t *testing.T) {
	clean(t)
	const n, size = 3, 8192
	chips := openChips(t, n)
	first := warmReq(n, size, WarmNamespace("t", 0, 1, false))
	ranks := mustAllocate(t, first, chips)
	bases := make([]uint64, n) // each rank's own window, as its chip maps it
	for r, rk := range ranks {
		bases[r] = rk.WindowBase
	}
	copy(mustBytes(t, chips[1], ranks[1].Bases[2], 5), "dirty") // rank 1 stores into rank 2's window
	oldCtx := ranks[0].DeviceCtx
	releaseAll(t, ranks)
	if got := warmLen(); got != n {
		t.Fatalf("%d ranks parked, want %d", got, n)
	}
	if left := namedObjects(t, "dom-t~0.1-"); len(left) != 0 {
		t.Fatalf("names of the parked domain remain: %v", left)
	}
	if _, err := Open(chips[0], oldCtx); err == nil {
		t.Fatal("a parked rank's CommContext still opens")
	}

	again := warmReq(n, size, WarmNamespace("t", 0, 1, true))
	again.Name = "a longer name than before"
	ranks = reuseAll(t, again, chips)
	t.Cleanup(func() { releaseAll(t, ranks) })
	if warmLen() != 0 {
		t.Fatal("taken back ranks are still parked")
	}
	for r, rk := range ranks {
		v := mustOpen(t, rk, chips[r])
		if v.AllocationID() != again.AllocationID || v.Name() != again.Name || v.Rank() != r || v.Size() != n {
			t.Errorf("rank %d opens as id %d name %q rank %d of %d", r, v.AllocationID(), v.Name(), v.Rank(), v.Size())
		}
		if rk.Bases[r] != bases[r] {
			t.Errorf("rank %d's window moved: %#x, was %#x", r, rk.Bases[r], bases[r])
		}
		if !bytes.Equal(mustBytes(t, chips[r], rk.WindowBase, size), make([]byte, size)) {
			t.Errorf("rank %d's window is not zero", r)
		}
	}
	// Peers still reach each other: a notify from rank 0 lands in rank 2.
	v0, v2 := mustOpen(t, ranks[0], chips[0]), mustOpen(t, ranks[2], chips[2])
	if err := v0.Notify(2, ranks[0].Bases[2], 8, 42, "set"); err != nil {
		t.Fatal(err)
	}
	if got, err := v2.Wait(ranks[2].WindowBase, 8, 42, "==", time.Second); err != nil || got != 42 {
		t.Fatalf("wait saw %d, %v", got, err)
	}
	releaseAll(t, ranks)

	// A fresh allocation in a new generation tears the parked ranks down
	// and meets at the barrier as usual.
	fresh := warmReq(n, size, WarmNamespace("t", 0, 2, false))
	ranks = mustAllocate(t, fresh, chips)
	if warmLen() != 0 {
		t.Fatal("the older generation is still parked")
	}
	releaseAll(t, ranks)
	if err := DrainPool(); err != nil {
		t.Fatal(err)
	}
	if warmLen() != 0 {
		t.Fatal("DrainPool left parked ranks")
	}
	wantBare(t, chips)
}

// TestWarmSlotWithoutParkedRankFailsAtOnce: a rank asked to take back
// what it never parked refuses at once, not at the barrier timeout.
func TestWarmSlotWithoutParkedRankFailsAtOnce(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	req := warmReq(2, 4096, WarmNamespace("t", 7, 1, true))
	start := time.Now()
	_, err := Allocate(req, 1, chips[1])
	if kind.Of(err) != kind.RuntimeError || !strings.Contains(err.Error(), "has no parked rank 1") {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > req.Timeout/2 {
		t.Fatalf("took %v", d)
	}
	// Another shape parked under the slot is not taken back either.
	ranks := mustAllocate(t, warmReq(2, 4096, WarmNamespace("t", 7, 1, false)), chips)
	releaseAll(t, ranks)
	if _, err := Allocate(warmReq(2, 8192, WarmNamespace("t", 7, 1, true)), 0, chips[0]); err == nil {
		t.Fatal("a rank of another window size was taken back")
	}
	if err := DrainPool(); err != nil {
		t.Fatal(err)
	}
	wantBare(t, chips)
}

// TestWarmRankWithAKernelLeftIsNotParked: a barrier round half full (a
// kernel that arrived and never left) means the header is not clean; the
// rank is torn down instead of parked.
func TestWarmRankWithAKernelLeftIsNotParked(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	ranks := mustAllocate(t, warmReq(2, 4096, WarmNamespace("t", 1, 1, false)), chips)
	v := mustOpen(t, ranks[0], chips[0])
	atomic.AddUint32(futex.Word32(v.hdr, hdrBarrier), 1)
	releaseAll(t, ranks)
	if got := warmLen(); got != 0 {
		t.Fatalf("%d ranks parked over a half-full barrier", got)
	}
	wantBare(t, chips)
}

// TestDropWarmTearsDownOneWorkersSlots: DropWarm takes only the slots of
// its namespace, and leaves the chips bare.
func TestDropWarmTearsDownOneWorkersSlots(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	a := mustAllocate(t, warmReq(2, 4096, WarmNamespace("a", 0, 1, false)), chips)
	b := mustAllocate(t, warmReq(2, 4096, WarmNamespace("b", 0, 1, false)), chips)
	releaseAll(t, a)
	releaseAll(t, b)
	if err := DropWarm(shm.Prefix(), "a"); err != nil {
		t.Fatal(err)
	}
	if got := warmLen(); got != 2 {
		t.Fatalf("%d parked after dropping a's, want b's 2", got)
	}
	if err := DropWarm(shm.Prefix(), "b"); err != nil {
		t.Fatal(err)
	}
	wantBare(t, chips)
}

// TestWarmReuseCostsNoSharedMemoryWork: taking a slot back creates,
// opens and renames nothing under /dev/shm.
func TestWarmReuseCostsNoSharedMemoryWork(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	ranks := mustAllocate(t, warmReq(2, 4096, WarmNamespace("t", 3, 1, false)), chips)
	releaseAll(t, ranks)
	before, err := os.ReadDir("/dev/shm")
	if err != nil {
		t.Fatal(err)
	}
	ranks = reuseAll(t, warmReq(2, 4096, WarmNamespace("t", 3, 1, true)), chips)
	after, err := os.ReadDir("/dev/shm")
	if err != nil {
		t.Fatal(err)
	}
	releaseAll(t, ranks)
	names := func(es []os.DirEntry) map[string]bool {
		m := map[string]bool{}
		for _, e := range es {
			if strings.HasPrefix(e.Name(), shm.Prefix()) {
				m[e.Name()] = true
			}
		}
		return m
	}
	b, a := names(before), names(after)
	for name := range a {
		if !b[name] {
			t.Errorf("reuse made %s", name)
		}
	}
	if err := errors.Join(DrainPool()); err != nil {
		t.Fatal(err)
	}
}
