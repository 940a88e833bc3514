package comm

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"simpler/internal/futex"
)

// pair allocates a 2-rank domain and opens a view on each rank.
func pair(t *testing.T, size int) ([]*Rank, []*View) {
	t.Helper()
	chips := openChips(t, 2)
	ranks := mustAllocate(t, newReq(2, size), chips)
	return ranks, []*View{mustOpen(t, ranks[0], chips[0]), mustOpen(t, ranks[1], chips[1])}
}

// load64 reads a window word as a kernel on v's chip would.
func load64(t *testing.T, v *View, addr uint64) int64 {
	t.Helper()
	b := mustBytes(t, v.chip, addr, 8)
	return atomic.LoadInt64((*int64)(unsafe.Pointer(&b[0])))
}

func TestNotifySetAndAdd(t *testing.T) {
	clean(t)
	ranks, views := pair(t, 4096)
	target := ranks[1].WindowBase
	// Through rank 0's mapping of rank 1's window, seen in rank 1's.
	if err := views[0].Notify(1, ranks[0].Bases[1]+8, 8, -1<<40, "set"); err != nil {
		t.Fatal(err)
	}
	if got := load64(t, views[1], target+8); got != -1<<40 {
		t.Errorf("8-byte set: rank 1 sees %d", got)
	}
	if err := views[0].Notify(1, ranks[0].Bases[1]+4, 4, -7, "set"); err != nil {
		t.Fatal(err)
	}
	if got, err := views[1].Wait(target+4, 4, -7, "==", time.Second); got != -7 || err != nil {
		t.Errorf("4-byte set: rank 1 sees %d, %v", got, err)
	}
	if err := views[0].Notify(1, ranks[0].Bases[1]+4, 4, math.MaxInt32+7+1, "add"); err == nil {
		t.Error("a 4-byte add of a value beyond int32 was accepted")
	}
	// Concurrent adds from both ranks' views into the same words sum
	// exactly, for both widths.
	const workers, adds = 8, 500
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, base := views[g%2], ranks[g%2].Bases[1]
			for range adds {
				if err := v.Notify(1, base+64, 4, 1, "add"); err != nil {
					t.Error(err)
					return
				}
				if err := v.Notify(1, base+128, 8, 1<<33, "add"); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b := mustBytes(t, views[1].chip, target, 4096)
	if got := int32(binary.LittleEndian.Uint32(b[64:])); got != workers*adds {
		t.Errorf("4-byte adds sum to %d, want %d", got, workers*adds)
	}
	if got := int64(binary.LittleEndian.Uint64(b[128:])); got != workers*adds<<33 {
		t.Errorf("8-byte adds sum to %d, want %d", got, int64(workers*adds)<<33)
	}
}

func TestNotifyRefusals(t *testing.T) {
	clean(t)
	ranks, views := pair(t, 4096)
	v, base := views[0], ranks[0].Bases[1]
	for _, tc := range []struct {
		rank  int
		addr  uint64
		width int
		value int64
		op    string
		want  string
	}{
		{2, base, 8, 1, "set", `IndexError: comm.notify: rank 2 out of range for domain "test" of 2 ranks`},
		{-1, base, 8, 1, "set", `IndexError: comm.notify: rank -1 out of range for domain "test" of 2 ranks`},
		{1, base, 2, 1, "set", "ValueError: comm.notify: width must be 4 or 8 bytes, got 2"},
		{1, base, 8, 1, "xor", `ValueError: comm.notify: op must be "set" or "add", got "xor"`},
		{1, base + 4, 8, 1, "set", fmt.Sprintf("ValueError: comm.notify: 8-byte word at %#x is not 8-byte aligned", base+4)},
		{1, base + 4096, 4, 1, "set", fmt.Sprintf(`ValueError: comm.notify: 4-byte word at %#x is not inside rank 1's window [%#x, %#x) of domain "test"`, base+4096, base, base+4096)},
		{1, base - 8, 8, 1, "set", fmt.Sprintf(`ValueError: comm.notify: 8-byte word at %#x is not inside rank 1's window [%#x, %#x) of domain "test"`, base-8, base, base+4096)},
		{1, ranks[0].Bases[0], 8, 1, "set", fmt.Sprintf(`ValueError: comm.notify: 8-byte word at %#x is not inside rank 1's window [%#x, %#x) of domain "test"`, ranks[0].Bases[0], base, base+4096)},
		{1, base, 4, 1 << 31, "set", "ValueError: comm.notify: value 2147483648 does not fit a 4-byte word"},
	} {
		wantErr(t, v.Notify(tc.rank, tc.addr, tc.width, tc.value, tc.op), tc.want)
	}
	// The last word of the window is fine.
	if err := v.Notify(1, base+4096-8, 8, 1, "set"); err != nil {
		t.Error(err)
	}
	if _, err := v.Base(2); err == nil || err.Error() != `IndexError: comm.base: rank 2 out of range for domain "test" of 2 ranks` {
		t.Errorf("Base(2): %v", err)
	}
}

func TestWaitCompares(t *testing.T) {
	clean(t)
	ranks, views := pair(t, 4096)
	v, own := views[1], ranks[1].WindowBase
	if err := views[0].Notify(1, ranks[0].Bases[1], 4, 5, "set"); err != nil {
		t.Fatal(err)
	}
	if err := views[0].Notify(1, ranks[0].Bases[1]+8, 8, -7, "set"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cmp       string
		value     int64
		holds     bool
		holdsWide bool // against -7 in the 8-byte word
	}{
		{">=", 5, true, false}, {">=", 6, false, false},
		{"==", 5, true, false}, {"==", -7, false, true},
		{"!=", 5, false, true}, {"!=", 4, true, true},
		{">", 4, true, false}, {">", 5, false, false},
		{"<", 6, true, true}, {"<", 5, false, true},
		{"<=", 5, true, true}, {"<=", 4, false, true},
	} {
		for _, w := range []struct {
			addr  uint64
			width int
			val   int64
			holds bool
		}{{own, 4, 5, tc.holds}, {own + 8, 8, -7, tc.holdsWide}} {
			got, err := v.Wait(w.addr, w.width, tc.value, tc.cmp, time.Millisecond)
			if w.holds && (err != nil || got != w.val) {
				t.Errorf("%d %s %d: %d, %v", w.val, tc.cmp, tc.value, got, err)
			}
			if !w.holds && (err == nil || !strings.HasPrefix(err.Error(), "TimeoutError: ") || got != w.val) {
				t.Errorf("%d %s %d should time out: %d, %v", w.val, tc.cmp, tc.value, got, err)
			}
		}
	}
	_, err := v.Wait(own, 4, 0, "=", time.Second)
	wantErr(t, err, `ValueError: comm.wait: cmp must be one of >=, ==, !=, >, <, <=; got "="`)
	_, err = v.Wait(own, 4, 0, "==", 0)
	wantErr(t, err, "ValueError: comm.wait: timeout must be > 0, got 0s")
	_, err = v.Wait(ranks[1].Bases[0], 4, 0, "==", time.Second)
	wantErrPrefix(t, err, "ValueError: comm.wait: 4-byte word at")
}

func TestWaitTimeoutMessage(t *testing.T) {
	clean(t)
	ranks, views := pair(t, 4096)
	if err := views[0].Notify(1, ranks[0].Bases[1]+16, 4, 3, "set"); err != nil {
		t.Fatal(err)
	}
	got, err := views[1].Wait(ranks[1].WindowBase+16, 4, 4, ">=", 50*time.Millisecond)
	wantErr(t, err, `TimeoutError: comm.wait on domain "test" rank 1: waited 50ms for value >= 4, observed 3`)
	if got != 3 {
		t.Errorf("observed %d", got)
	}
}

// sleeping waits until rank's Wait is blocked, in the kernel or (every
// rank in this process, wake.go) parked in Go, so that the next Notify
// has to wake it.
func sleeping(t *testing.T, v *View, rank int) {
	eventually(t, "the waiter to sleep", func() bool {
		return atomic.LoadUint32(futex.Word32(v.hdr, rankWord(rank, rankSleepers))) > 0 ||
			(v.wk != nil && v.wk.ranks[rank].parked.Load() > 0)
	})
}

// Notify wakes a sleeping waiter, also for an 8-byte word whose low 32
// bits never change.
func TestWaitIsWoken(t *testing.T) {
	clean(t)
	ranks, views := pair(t, 4096)
	for _, tc := range []struct {
		off    uint64
		width  int
		step   int64
		steps  int
		cmp    string
		target int64
	}{
		{0, 4, 1, 4, ">=", 4},
		{8, 8, 1 << 32, 3, "==", 3 << 32},
		{16, 8, -1, 2, "<=", -2},
	} {
		type result struct {
			v   int64
			err error
		}
		res := make(chan result, 1)
		go func() {
			v, err := views[1].Wait(ranks[1].WindowBase+tc.off, tc.width, tc.target, tc.cmp, 20*time.Second)
			res <- result{v, err}
		}()
		for range tc.steps {
			sleeping(t, views[0], 1)
			if err := views[0].Notify(1, ranks[0].Bases[1]+tc.off, tc.width, tc.step, "add"); err != nil {
				t.Fatal(err)
			}
		}
		if r := <-res; r.err != nil || r.v != tc.target {
			t.Errorf("wait %s %d: %d, %v", tc.cmp, tc.target, r.v, r.err)
		}
	}
}

func TestBarrierReuse(t *testing.T) {
	clean(t)
	const n, rounds = 4, 1000
	chips := openChips(t, n)
	ranks := mustAllocate(t, newReq(n, 4096), chips)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := Open(chips[r], ranks[r].DeviceCtx)
			if err != nil {
				t.Error(err)
				return
			}
			slots := mustBytesNoFatal(chips[r], ranks[r].Bases[0], 8*n)
			for k := int64(1); k <= rounds; k++ {
				// Announce the round in rank 0's window, then check after
				// the barrier that everyone has announced it.
				if err := v.Notify(0, ranks[r].Bases[0]+uint64(8*r), 8, k, "set"); err != nil {
					t.Error(err)
					return
				}
				if err := v.Barrier(20 * time.Second); err != nil {
					t.Error(err)
					return
				}
				for j := range n {
					if got := atomic.LoadInt64((*int64)(unsafe.Pointer(&slots[8*j]))); got < k {
						t.Errorf("rank %d after barrier %d: rank %d is at round %d", r, k, j, got)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

func mustBytesNoFatal(c interface {
	Bytes(uint64, int) ([]byte, error)
}, addr uint64, n int) []byte {
	b, err := c.Bytes(addr, n)
	if err != nil {
		panic(err)
	}
	return b
}

// A rank that times out says who never came, withdraws, and leaves the
// barrier usable: the round completes once everyone calls again.
func TestBarrierTimeout(t *testing.T) {
	clean(t)
	const n = 4
	chips := openChips(t, n)
	ranks := mustAllocate(t, newReq(n, 4096), chips)
	views := make([]*View, n)
	for r := range n {
		views[r] = mustOpen(t, ranks[r], chips[r])
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = views[r].Barrier(20 * time.Second) }()
	}
	eventually(t, "ranks 0 and 1 to arrive", func() bool {
		return atomic.LoadUint32(futex.Word32(views[0].hdr, hdrBarrier))&0xffff == 2
	})
	wantErr(t, views[2].Barrier(30*time.Millisecond),
		`TimeoutError: comm.barrier on domain "test" rank 2: waited 30ms; 3 of 4 ranks arrived; missing rank 3`)
	wantErr(t, views[3].Barrier(30*time.Millisecond),
		`TimeoutError: comm.barrier on domain "test" rank 3: waited 30ms; 4 of 4 ranks arrived; rank 2 gave up waiting`)
	// Now ranks 2 and 3 come together: the round completes for all four.
	for r := 2; r < n; r++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = views[r].Barrier(20 * time.Second) }()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if w := atomic.LoadUint32(futex.Word32(views[0].hdr, hdrBarrier)); w != 1<<16 {
		t.Errorf("barrier word %#x after one round, want generation 1 with none arrived", w)
	}
	// A single-rank domain never waits.
	one := mustAllocate(t, newReq(1, 4096), chips[:1])
	if err := mustOpen(t, one[0], chips[0]).Barrier(time.Millisecond); err != nil {
		t.Error(err)
	}
}

func TestOpenRefusals(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	ranks := mustAllocate(t, newReq(2, 4096), chips)
	notLive := func(ptr uint64, dev int) string {
		return fmt.Sprintf("ValueError: chip.comm: %#x is not a live communication domain on device %d", ptr, dev)
	}
	// A random pointer, aligned or not.
	for _, p := range []uint64{0xdead_beef_0000, 0x1234} {
		_, err := Open(chips[0], p)
		wantErrPrefix(t, err, notLive(p, 0))
	}
	// Live memory that holds no CommContext.
	zero, err := chips[0].Malloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(chips[0], zero)
	wantErr(t, err, notLive(zero, 0)+": no CommContext there")
	// Inside a window, not a context.
	_, err = Open(chips[0], ranks[0].WindowBase)
	wantErr(t, err, notLive(ranks[0].WindowBase, 0)+": no CommContext there")
	// Another chip's context.
	_, err = Open(chips[1], ranks[0].DeviceCtx)
	wantErrPrefix(t, err, notLive(ranks[0].DeviceCtx, 1))
	if err != nil && !strings.Contains(err.Error(), "it is an address on device 0") {
		t.Errorf("error does not say whose address it is: %v", err)
	}
	// A released one; a View opened before the release refuses too.
	v := mustOpen(t, ranks[0], chips[0])
	ctx := ranks[0].DeviceCtx
	if err := ranks[0].Release(); err != nil {
		t.Fatal(err)
	}
	_, err = Open(chips[0], ctx)
	wantErrPrefix(t, err, notLive(ctx, 0))
	wantErr(t, v.Notify(1, v.bases[1], 8, 1, "set"), `RuntimeError: comm.notify: domain "test" rank 0 was released`)
	_, err = v.Wait(v.bases[0], 8, 1, "==", time.Second)
	wantErr(t, err, `RuntimeError: comm.wait: domain "test" rank 0 was released`)
	wantErr(t, v.Barrier(time.Second), `RuntimeError: comm.barrier: domain "test" rank 0 was released`)
	if err := chips[0].Free(zero); err != nil {
		t.Fatal(err)
	}
}

// A context marked dead but not yet freed (Release in progress) is
// refused by its flag alone.
func TestOpenDeadFlag(t *testing.T) {
	clean(t)
	chips := openChips(t, 1)
	ranks := mustAllocate(t, newReq(1, 4096), chips)
	b := mustBytes(t, chips[0], ranks[0].DeviceCtx+offLive, 4)
	atomic.StoreUint32(futex.Word32(b, 0), 0)
	_, err := Open(chips[0], ranks[0].DeviceCtx)
	wantErr(t, err, fmt.Sprintf("RuntimeError: chip.comm: %#x on device 0: the domain was released", ranks[0].DeviceCtx))
}
