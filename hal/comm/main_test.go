package comm

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"simpler/hal"
	"simpler/hal/shm"
	"simpler/internal/futex"
	"simpler/internal/leakcheck"
)

// TestMain drains the pool before the leak checks: the pool legitimately
// holds objects between tests, but none may outlive DrainPool. (Each test
// also drains and checks after itself, see clean.)
func TestMain(m *testing.M) { os.Exit(leakcheck.RunThen(m, DrainPool)) }

// clean registers the per-test leak check: after the test's own cleanups
// (registered later, so run earlier) have released everything, the pool
// is drained and no object of this process may remain.
func clean(tb testing.TB) {
	tb.Helper()
	tb.Cleanup(func() {
		if err := DrainPool(); err != nil {
			tb.Errorf("DrainPool: %v", err)
		}
		left, err := shm.Leftovers(shm.Prefix())
		if err != nil || len(left) > 0 {
			tb.Errorf("shared memory left behind: %v %v", left, err)
		}
		cacheMu.Lock()
		n := len(cache)
		cacheMu.Unlock()
		if n != 0 {
			tb.Errorf("%d mappings still cached", n)
		}
	})
}

var allocSeq atomic.Uint64

func newReq(n, size int) Request {
	return Request{Namespace: "t", AllocationID: allocSeq.Add(1), Name: "test",
		Ranks: n, WindowSize: size, Timeout: 20 * time.Second}
}

func openChips(tb testing.TB, n int) []hal.Chip {
	tb.Helper()
	p, err := hal.Lookup("a2a3sim")
	if err != nil {
		tb.Fatal(err)
	}
	chips := make([]hal.Chip, n)
	for i := range chips {
		if chips[i], err = p.OpenChip(i); err != nil {
			tb.Fatal(err)
		}
		c := chips[i]
		tb.Cleanup(func() { c.Close() })
	}
	return chips
}

// allocate runs Allocate for every rank concurrently, one goroutine per
// rank as the engine does.
func allocate(req Request, chips []hal.Chip) ([]*Rank, []error) {
	ranks := make([]*Rank, req.Ranks)
	errs := make([]error, req.Ranks)
	var wg sync.WaitGroup
	for r := range req.Ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ranks[r], errs[r] = Allocate(req, r, chips[r])
		}()
	}
	wg.Wait()
	return ranks, errs
}

// mustAllocate allocates all ranks and releases them at cleanup.
func mustAllocate(tb testing.TB, req Request, chips []hal.Chip) []*Rank {
	tb.Helper()
	ranks, errs := allocate(req, chips)
	tb.Cleanup(func() { releaseAll(tb, ranks) })
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
	return ranks
}

func releaseAll(tb testing.TB, ranks []*Rank) {
	tb.Helper()
	for _, r := range ranks {
		if r != nil {
			if err := r.Release(); err != nil {
				tb.Error(err)
			}
		}
	}
}

func mustOpen(tb testing.TB, r *Rank, chip hal.Chip) *View {
	tb.Helper()
	v, err := Open(chip, r.DeviceCtx)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

func mustBytes(tb testing.TB, chip hal.Chip, addr uint64, n int) []byte {
	tb.Helper()
	b, err := chip.Bytes(addr, n)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func wantErr(tb testing.TB, err error, want string) {
	tb.Helper()
	if err == nil || err.Error() != want {
		tb.Errorf("error = %v\n  want %s", err, want)
	}
}

func wantErrPrefix(tb testing.TB, err error, want string) {
	tb.Helper()
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		tb.Errorf("error = %v\n  want it to start with %s", err, want)
	}
}

// headerWord reads a word of req's header through this process's cached
// mapping; ok is false while no rank here has the header open.
func headerWord(req Request, off int) (v uint32, ok bool) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	o := cache[req.headerName()]
	if o == nil {
		return 0, false
	}
	return atomic.LoadUint32(futex.Word32(o.seg.Mem, off)), true
}

// eventually polls cond, yielding in between, until it holds or a generous
// deadline passes. It waits for another goroutine's progress, not for time.
func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("gave up waiting for %s", what)
		}
		runtime.Gosched()
	}
}

func TestMagic(t *testing.T) {
	if ctxMagic != 0x4d4d4f434c504d53 {
		t.Errorf("magic %#x", ctxMagic)
	}
}
