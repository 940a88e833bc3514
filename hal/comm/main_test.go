package comm

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
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
		if n := wakeLen(); n != 0 {
			tb.Errorf("%d headers still in the wake registry", n)
		}
	})
}

var allocSeq atomic.Uint64

func newReq(n, size int) Request {
	return Request{Namespace: "t", AllocationID: allocSeq.Add(1), Name: "test",
		Ranks: n, WindowSize: size, Timeout: 20 * time.Second, Key: NewKey()}
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

// wantBare checks that no chip holds an allocation or a window any more.
func wantBare(tb testing.TB, chips []hal.Chip) {
	tb.Helper()
	for i, c := range chips {
		if a, w := c.Live(); a != 0 || w != 0 {
			tb.Errorf("chip %d: %d allocations, %d windows left", i, a, w)
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

// testChild is this test binary run again as a child process, to play
// the other side of a test that spans processes.
type testChild struct {
	cmd    *exec.Cmd
	prefix string       // its shm prefix
	out    bytes.Buffer // read it only after reap
	once   sync.Once
	err    error
}

// startChild runs the test name in a child process with env set to spec
// as JSON (the test, finding it set, plays the child's part) and extra
// as the child's fds 3 and up; it closes this process's copies of extra,
// so that EOF reaches the parent when the child exits. The child has a
// shm prefix of its own, as another node would. It is reaped at cleanup
// at the latest.
func startChild(t *testing.T, name, env string, spec any, extra ...*os.File) *testChild {
	t.Helper()
	return startChildUnder(t, shm.NewPrefix(), name, env, spec, extra...)
}

// startChildUnder is startChild with the child's shm prefix: this
// process's own makes it a child that creates names under it (as a chip's
// process does under its parent's).
func startChildUnder(t *testing.T, prefix, name, env string, spec any, extra ...*os.File) *testChild {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	c := &testChild{cmd: exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1"), prefix: prefix}
	// GORACE: a race-enabled child would otherwise linger a second at exit.
	c.cmd.Env = append(os.Environ(), env+"="+string(b), "GORACE=atexit_sleep_ms=0", shm.PrefixEnv+"="+prefix)
	c.cmd.ExtraFiles = extra
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	err = c.cmd.Start()
	for _, f := range extra {
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.reap() })
	return c
}

// reap waits for the child to exit (once) and returns how it did.
func (c *testChild) reap() error {
	c.once.Do(func() { c.err = c.cmd.Wait() })
	return c.err
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
