package comm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"simpler/hal/shm"
)

func TestAllocate(t *testing.T) {
	for _, n := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			clean(t)
			const size = 3 * 4096
			chips := openChips(t, n)
			req := newReq(n, size)
			ranks := mustAllocate(t, req, chips)
			for r, rk := range ranks {
				if rk.Rank != r || rk.Size != n || rk.WindowSize != size || len(rk.Bases) != n || rk.Bases[r] != rk.WindowBase {
					t.Fatalf("rank %d: %+v", r, rk)
				}
				if allocs, windows := chips[r].Live(); allocs != 1 || windows != n+1 {
					t.Errorf("rank %d: chip holds %d allocations, %d windows; want 1 and %d", r, allocs, windows, n+1)
				}
				for j, base := range rk.Bases {
					if !bytes.Equal(mustBytes(t, chips[r], base, size), make([]byte, size)) {
						t.Errorf("rank %d's view of rank %d's window is not zero", r, j)
					}
				}
				v := mustOpen(t, rk, chips[r])
				if v.Rank() != r || v.Size() != n || v.WindowSize() != size || v.Name() != "test" || v.AllocationID() != req.AllocationID {
					t.Errorf("view of rank %d: rank %d size %d window %d name %q id %d", r, v.Rank(), v.Size(), v.WindowSize(), v.Name(), v.AllocationID())
				}
				for j := range n {
					if b, err := v.Base(j); err != nil || b != rk.Bases[j] {
						t.Errorf("rank %d: Base(%d) = %#x, %v; want %#x", r, j, b, err, rk.Bases[j])
					}
				}
			}
			// Rank i writes its mark into every window j through its own
			// mapping; each rank then finds all marks through its own base.
			for i, rk := range ranks {
				for j, base := range rk.Bases {
					mark := fmt.Sprintf("from %d to %d.", i, j)
					copy(mustBytes(t, chips[i], base+uint64(16*i), 16), mark)
				}
			}
			for j, rk := range ranks {
				own := mustBytes(t, chips[j], rk.WindowBase, size)
				for i := range n {
					want := fmt.Sprintf("from %d to %d.", i, j)
					if got := string(own[16*i : 16*i+len(want)]); got != want {
						t.Errorf("rank %d's window at %d holds %q, want %q", j, 16*i, got, want)
					}
				}
			}
			// The window objects are named; the header's name is gone as
			// soon as everyone has it mapped.
			left, err := shm.Leftovers(shm.Prefix() + fmt.Sprintf("dom-t-%d-", req.AllocationID))
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for r := range n {
				want = append(want, req.windowName(r))
			}
			slices.Sort(left)
			slices.Sort(want)
			if !slices.Equal(left, want) {
				t.Errorf("objects of the live domain: %v, want %v", left, want)
			}
			releaseAll(t, ranks)
			wantBare(t, chips)
			if left, _ := shm.Leftovers(shm.Prefix() + "dom-"); len(left) != 0 {
				t.Errorf("names left after release: %v", left)
			}
		})
	}
}

// hostAddr is where a window lives in this process, to tell mappings apart.
func hostAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func TestPoolReuseIsZeroed(t *testing.T) {
	clean(t)
	const size = 64 << 10
	chips := openChips(t, 2)
	first := mustAllocate(t, newReq(2, size), chips)
	mapped := map[uintptr]bool{}
	for r, rk := range first {
		b := mustBytes(t, chips[r], rk.WindowBase, size)
		mapped[hostAddr(b)] = true
		for i := range b {
			b[i] = 0xa5
		}
	}
	releaseAll(t, first)
	if n := poolLen(); n != 3 {
		t.Fatalf("%d objects pooled after release, want 2 windows and the header", n)
	}
	if left, _ := shm.Leftovers(shm.Prefix()); len(left) != 3 || !strings.Contains(left[0], "-dompool-") {
		t.Errorf("objects after release: %v, want 3 pooled", left)
	}
	second := mustAllocate(t, newReq(2, size), chips)
	if n := poolLen(); n != 0 {
		t.Errorf("%d objects still pooled after reallocating", n)
	}
	for r, rk := range second {
		b := mustBytes(t, chips[r], rk.WindowBase, size)
		if !mapped[hostAddr(b)] {
			t.Errorf("rank %d got a fresh mapping, not a pooled one", r)
		}
		if i := slices.IndexFunc(b, func(x byte) bool { return x != 0 }); i >= 0 {
			t.Errorf("reused window of rank %d is dirty at %d", r, i)
		}
	}
	// Another size is not served from the pool.
	releaseAll(t, second)
	third := mustAllocate(t, newReq(2, size+4096), chips)
	for r, rk := range third {
		if mapped[hostAddr(mustBytes(t, chips[r], rk.WindowBase, size))] {
			t.Errorf("rank %d reused a window of another size", r)
		}
	}
	if n := poolLen(); n != 2 {
		t.Errorf("%d objects pooled, want the 2 windows of the other size", n)
	}
}

// pooledSizes lists the sizes of the idle pooled objects, oldest first.
func pooledSizes() []int {
	poolMu.Lock()
	defer poolMu.Unlock()
	var sizes []int
	for _, s := range pool {
		sizes = append(sizes, len(s.Mem))
	}
	return sizes
}

func TestPoolBounds(t *testing.T) {
	clean(t)
	chips := openChips(t, 1)
	// Windows of ever new sizes; the header is reused every time.
	for i := range poolMaxObjects + 3 {
		ranks := mustAllocate(t, newReq(1, 4096*(i+2)), chips)
		releaseAll(t, ranks)
	}
	if n := poolLen(); n != poolMaxObjects {
		t.Errorf("pool holds %d objects, want the bound %d", n, poolMaxObjects)
	}
	if left, _ := shm.Leftovers(shm.Prefix()); len(left) != poolMaxObjects {
		t.Errorf("objects: %v", left)
	}
	if sizes := pooledSizes(); slices.Contains(sizes, 4096*2) || !slices.Contains(sizes, 4096*(poolMaxObjects+4)) {
		t.Errorf("pooled sizes %v: want the oldest evicted, the newest kept", sizes)
	}
	if err := DrainPool(); err != nil {
		t.Fatal(err)
	}
	// The byte bound: two big windows (never touched, so cheap) exceed
	// it together; the older one goes.
	const big = 300 << 20
	for _, size := range []int{big, big + 4096} {
		ranks := mustAllocate(t, newReq(1, size), chips)
		releaseAll(t, ranks)
	}
	if sizes := pooledSizes(); slices.Contains(sizes, big) || !slices.Contains(sizes, big+4096) {
		t.Errorf("pooled sizes %v: want the older big window evicted", sizes)
	}
}

// A fast rank that stores into a slow peer's window right after the
// barrier must not lose the store: the peer zeroed its (dirty, pooled)
// window before it joined.
func TestZeroBeforeBarrier(t *testing.T) {
	clean(t)
	const size = 4096
	chips := openChips(t, 2)
	dirty := mustAllocate(t, newReq(2, size), chips)
	for r, rk := range dirty {
		copy(mustBytes(t, chips[r], rk.WindowBase, size), bytes.Repeat([]byte{0xff}, size))
	}
	releaseAll(t, dirty)
	// Make every idle object dirty, the header included (it has the
	// windows' size here, so either may serve as the other).
	poolMu.Lock()
	for _, seg := range pool {
		copy(seg.Mem, bytes.Repeat([]byte{0xff}, len(seg.Mem)))
	}
	n := len(pool)
	poolMu.Unlock()
	if n != 3 {
		t.Fatalf("want both windows and the header pooled, have %d", n)
	}

	req := newReq(2, size)
	hold := make(chan struct{})
	testHookJoined = func(q Request, rank int) {
		if q.AllocationID == req.AllocationID && rank == 1 {
			<-hold
		}
	}
	t.Cleanup(func() { testHookJoined = nil })
	var slow *Rank
	var slowErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		slow, slowErr = Allocate(req, 1, chips[1])
	}()
	fast, err := Allocate(req, 0, chips[0])
	if err != nil {
		close(hold)
		<-done
		t.Fatal(err)
	}
	t.Cleanup(func() { fast.Release() })
	// Rank 1 is past the barrier but has not returned from Allocate.
	v0 := mustOpen(t, fast, chips[0])
	if err := v0.Notify(1, fast.Bases[1]+64, 8, 42, "set"); err != nil {
		t.Fatal(err)
	}
	close(hold)
	<-done
	if slowErr != nil {
		t.Fatal(slowErr)
	}
	t.Cleanup(func() { slow.Release() })
	v1 := mustOpen(t, slow, chips[1])
	got, err := v1.Wait(slow.WindowBase+64, 8, 42, "==", time.Second)
	if err != nil || got != 42 {
		t.Fatalf("slow rank sees %d, %v; the signal was lost", got, err)
	}
	b := mustBytes(t, chips[1], slow.WindowBase, size)
	if binary.LittleEndian.Uint64(b[64:]) != 42 || !bytes.Equal(b[:64], make([]byte, 64)) || !bytes.Equal(b[72:], make([]byte, size-72)) {
		t.Error("slow rank's window is not zero apart from the signal")
	}
}

func TestReleaseIdempotent(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	ranks := mustAllocate(t, newReq(2, 4096), chips)
	for round := range 2 {
		for _, rk := range ranks {
			if err := rk.Release(); err != nil {
				t.Errorf("release %d of rank %d: %v", round+1, rk.Rank, err)
			}
		}
	}
	wantBare(t, chips)
}

func TestAllocateTimeout(t *testing.T) {
	clean(t)
	chips := openChips(t, 1)
	req := newReq(2, 4096)
	req.Timeout = 50 * time.Millisecond
	r, err := Allocate(req, 0, chips[0])
	if r != nil {
		r.Release()
	}
	wantErr(t, err, fmt.Sprintf(`TimeoutError: comm: allocating domain "test" (allocation %d) rank 0: waited 50ms at the subset barrier; 1 of 2 ranks arrived; missing rank 1`, req.AllocationID))
	wantBare(t, chips)
}

// A rank that gives up marks the allocation abandoned: a peer still
// waiting fails at once rather than at its own, much later, timeout.
func TestAllocateAbandoned(t *testing.T) {
	clean(t)
	chips := openChips(t, 3)
	req := newReq(3, 4096)
	var err1 error
	done := make(chan struct{})
	go func() {
		defer close(done)
		var r *Rank
		if r, err1 = Allocate(req, 1, chips[1]); r != nil {
			r.Release()
		}
	}()
	eventually(t, "rank 1 to arrive", func() bool {
		v, ok := headerWord(req, hdrAlloc)
		return ok && v == 1
	})
	quick := req
	quick.Timeout = 20 * time.Millisecond
	r0, err0 := Allocate(quick, 0, chips[0])
	if r0 != nil {
		r0.Release()
	}
	<-done
	wantErr(t, err0, fmt.Sprintf(`TimeoutError: comm: allocating domain "test" (allocation %d) rank 0: waited 20ms at the subset barrier; 2 of 3 ranks arrived; missing rank 2`, req.AllocationID))
	wantErr(t, err1, fmt.Sprintf(`RuntimeError: comm: allocating domain "test" (allocation %d) rank 1: a peer gave up on the allocation; 2 of 3 ranks had arrived; missing rank 2`, req.AllocationID))
	// A latecomer finds no header (its name is gone), makes a new one
	// and times out alone; nothing leaks either way.
	late := req
	late.Timeout = 10 * time.Millisecond
	if r, err := Allocate(late, 2, chips[2]); err == nil || !strings.Contains(err.Error(), "1 of 3 ranks arrived; missing ranks 0, 1") {
		t.Errorf("latecomer: %v", err)
		if r != nil {
			r.Release()
		}
	}
}

// A rank whose chip fails after the barrier undoes its part; the others'
// parts are released by the caller and nothing is left behind.
func TestAllocateFailsOnClosedChip(t *testing.T) {
	clean(t)
	chips := openChips(t, 3)
	chips[2].Close()
	req := newReq(3, 4096)
	ranks, errs := allocate(req, chips)
	wantErr(t, errs[2], fmt.Sprintf(`RuntimeError: comm: allocating domain "test" (allocation %d) rank 2: device 2 is closed`, req.AllocationID))
	if ranks[2] != nil {
		t.Error("a failed Allocate returned a Rank")
	}
	releaseAll(t, ranks)
	wantBare(t, chips[:2])
}

func TestAllocateBadRequest(t *testing.T) {
	clean(t)
	chips := openChips(t, 1)
	ok := newReq(1, 4096)
	dom := fmt.Sprintf(`"test" (allocation %d)`, ok.AllocationID)
	for _, tc := range []struct {
		edit func(*Request)
		rank int
		want string
	}{
		{func(q *Request) { q.Ranks = 0 }, 0, "ValueError: comm: allocating domain " + dom + ": 0 ranks; want 1..4096"},
		{func(q *Request) {}, 1, "IndexError: comm: allocating domain " + dom + ": rank 1 out of range for 1 ranks"},
		{func(q *Request) { q.WindowSize = 0 }, 0, "ValueError: comm: allocating domain " + dom + ": window size must be > 0, got 0"},
		{func(q *Request) { q.Timeout = 0 }, 0, "ValueError: comm: allocating domain " + dom + ": timeout must be > 0, got 0s"},
		{func(q *Request) { q.Namespace = "a/b" }, 0, "ValueError: comm: allocating domain " + dom + `: bad namespace "a/b"`},
		{func(q *Request) { q.Prefix = "other-" }, 0, "ValueError: comm: allocating domain " + dom + `: name prefix "other-" must start with "simpler-" and contain no "/"`},
		{func(q *Request) { q.Key = "" }, 0, "ValueError: comm: allocating domain " + dom + `: the key must be 32 lowercase hex digits (NewKey), got ""`},
		{func(q *Request) { q.Key = strings.ToUpper(q.Key) }, 0, "ValueError: comm: allocating domain " + dom + ": the key must be 32 lowercase hex digits (NewKey), got " + strconv.Quote(strings.ToUpper(ok.Key))},
		{func(q *Request) { q.Key = "0123" }, 0, "ValueError: comm: allocating domain " + dom + `: the key must be 32 lowercase hex digits (NewKey), got "0123"`},
	} {
		q := ok
		tc.edit(&q)
		r, err := Allocate(q, tc.rank, chips[0])
		if r != nil {
			r.Release()
		}
		wantErr(t, err, tc.want)
	}
}

// A rank whose attach fails after the barrier (here: mapping a peer's
// window) undoes all of it, and its peers, through the barrier already,
// are released by the caller; nothing is left behind. The failure waits
// for the peers to finish, or they could find its window gone.
func TestAllocateMapFailureUndoes(t *testing.T) {
	clean(t)
	chips := openChips(t, 3)
	req := newReq(3, 4096)
	peersDone := make(chan struct{})
	testHookMapPeer = func(rank, peer int) error {
		if rank == 1 && peer == 2 {
			<-peersDone
			return errors.New("injected")
		}
		return nil
	}
	t.Cleanup(func() { testHookMapPeer = nil })
	ranks := make([]*Rank, 3)
	errs := make([]error, 3)
	var failed sync.WaitGroup
	failed.Go(func() { ranks[1], errs[1] = Allocate(req, 1, chips[1]) })
	var peers sync.WaitGroup
	for _, r := range []int{0, 2} {
		peers.Go(func() { ranks[r], errs[r] = Allocate(req, r, chips[r]) })
	}
	peers.Wait()
	close(peersDone)
	failed.Wait()
	t.Cleanup(func() { releaseAll(t, ranks) })
	wantErr(t, errs[1], fmt.Sprintf(`RuntimeError: comm: allocating domain "test" (allocation %d) rank 1: mapping the window of rank 2: injected`, req.AllocationID))
	if ranks[1] != nil || errs[0] != nil || errs[2] != nil {
		t.Fatalf("ranks %v, errors %v", ranks, errs)
	}
	wantBare(t, chips[1:2])
	if left, _ := shm.Leftovers(req.windowName(1)); len(left) != 0 {
		t.Errorf("the failed rank's window is still named: %v", left)
	}
}

// A rank's window loses its name when the rank releases, even while a
// peer in this process still maps it (as a global rank's does); the peer
// keeps working on the memory until it releases too.
func TestReleaseRetiresWindowName(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	req := newReq(2, 4096)
	ranks := mustAllocate(t, req, chips)
	v1 := mustOpen(t, ranks[1], chips[1])
	if err := ranks[0].Release(); err != nil {
		t.Fatal(err)
	}
	left, _ := shm.Leftovers(shm.Prefix() + fmt.Sprintf("dom-t-%d-", req.AllocationID))
	if !slices.Equal(left, []string{req.windowName(1)}) {
		t.Errorf("names after rank 0 released: %v, want only rank 1's window", left)
	}
	if err := v1.Notify(0, ranks[1].Bases[0], 8, 5, "set"); err != nil {
		t.Error(err)
	}
	if got := binary.LittleEndian.Uint64(mustBytes(t, chips[1], ranks[1].Bases[0], 8)); got != 5 {
		t.Errorf("rank 0's window as rank 1 maps it holds %d", got)
	}
}

// Name squatting: another user who lists /dev/shm and takes every name an
// allocation could have by the old pattern (prefix, namespace, the next
// allocation ids, no key) and pool names does not stop an allocation,
// whose names carry a key drawn for it. The squatted files stay theirs.
func TestAllocateDespiteSquattedNames(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	req := newReq(2, 4096)
	var squatted []string
	for id := req.AllocationID; id < req.AllocationID+64; id++ {
		stem := fmt.Sprintf("%sdom-%s-%d-", shm.Prefix(), req.Namespace, id)
		for _, suffix := range []string{"hdr", "r0", "r1"} {
			squatted = append(squatted, stem+suffix)
		}
		squatted = append(squatted, fmt.Sprintf("%sdompool-%d-%d", shm.Prefix(), os.Getpid(), id))
	}
	for _, name := range squatted {
		if err := os.WriteFile("/dev/shm/"+name, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			if err := os.Chown("/dev/shm/"+name, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer func() {
		for _, name := range squatted {
			os.Remove("/dev/shm/" + name)
		}
	}()
	for range 3 { // fresh objects, then pooled ones renamed
		ranks := mustAllocate(t, req, chips)
		for r, rank := range ranks {
			if name := req.windowName(r); !strings.Contains(name, req.Key) {
				t.Errorf("rank %d's window %q does not carry the key", r, name)
			}
			if err := rank.Release(); err != nil {
				t.Fatal(err)
			}
		}
		req.AllocationID, req.Key = allocSeq.Add(1), NewKey()
	}
	for _, name := range squatted {
		if _, err := os.Lstat("/dev/shm/" + name); err != nil {
			t.Errorf("squatted %s is gone: %v", name, err)
		}
	}
}
