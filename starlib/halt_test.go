package starlib

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// stopScript blocks one kernel, argv[0] names which, in a way argv[1]
// names its stop: its task's deadline, the run's cancel(), or close().
// Each kernel would run for 120 s (or, the matmul, tens of seconds) if
// the stop did not reach the builtin it is in.
const stopScript = `
# Each kernel sets its flag (args.tensor(0)) just before it blocks.
def blocked_wait(chip, args):
    comm = chip.comm(args.scalar(0))
    word = comm.window(comm.rank).view(shape = [1], dtype = INT64)
    args.tensor(0).fill(1)
    comm.wait(word, 1, timeout_s = 120)

def blocked_barrier(chip, args):
    comm = chip.comm(args.scalar(0))
    args.tensor(0).fill(1)
    comm.barrier(timeout_s = 120)

def long_matmul(chip, args):
    a = array.zeros([4096, 4096])
    args.tensor(0).fill(1)
    array.matmul(a, a)

KERNELS = {"wait": blocked_wait, "barrier": blocked_barrier, "matmul": long_matmul}

def main(ctx):
    kernel, how = ctx.argv[0], ctx.argv[1]
    w = Worker(level = 3, device_ids = [0, 1], close_timeout_s = 0.5)
    w.register(KERNELS[kernel])
    w.init()
    config = CallConfig(timeout_s = 1) if how == "deadline" else CallConfig()
    flag = host_tensor(shape = [1])
    def orch(o, a, c):
        d = o.allocate_domain(name = "d", workers = [0, 1], window_size = 64)
        o.submit_next_level(KERNELS[kernel], TaskArgs(tensors = [(flag, OUTPUT_EXISTING)], scalars = [d[0].device_ctx]),
                            config = config, worker = 0)
    r = w.submit(orch)
    if how == "deadline":
        print("outcome:", catch(r.wait))
    else:
        for i in range(10000000):
            if flag.read()[0] == 1.0:
                break
        print("running:", not r.done)
        if how == "cancel":
            r.cancel()
            print("outcome:", catch(r.wait))
        else:
            print("close:", catch(w.close))
            print("outcome:", catch(r.wait))
    w.close()
`

// TestStopReachesBlockedBuiltins: in thread mode a kernel blocked in
// comm.wait or comm.barrier (each with a 120 s timeout of its own) or in
// a long matmul is ended by its task's 1 s deadline, by cancel() and by
// close(), within a bound of the stop; the run's outcome is the deadline's
// TimeoutError or the cancel's RuntimeError.
func TestStopReachesBlockedBuiltins(t *testing.T) {
	for _, kernel := range []string{"wait", "barrier", "matmul"} {
		for _, how := range []string{"deadline", "cancel", "close"} {
			t.Run(kernel+"/"+how, func(t *testing.T) {
				start := time.Now()
				out, err := runScript(t, map[string]string{"main.star": stopScript}, kernel, how)
				took := time.Since(start)
				if err != nil {
					t.Fatalf("script: %v\n%s", err, out)
				}
				// The stop comes at 1 s (deadline), at once (cancel) or 0.5 s
				// on (close).
				if took > 3*time.Second {
					t.Errorf("took %v; want the kernel stopped within a second of its stop\n%s", took, out)
				}
				var want []string
				switch how {
				case "deadline":
					want = []string{"outcome: TimeoutError: chip_worker 0 (device 0): task 1 running", "past its deadline of 1s"}
				case "cancel":
					want = []string{"running: True", "outcome: RuntimeError: run 1 cancelled"}
				case "close":
					want = []string{"running: True",
						"close: RuntimeError: close: run 1 still running after close_timeout_s=500ms: cancelled\n",
						"outcome: RuntimeError: run 1 cancelled"}
				}
				for _, w := range want {
					if !strings.Contains(out, w) {
						t.Errorf("output lacks %q:\n%s", w, out)
					}
				}
			})
		}
	}
}

// lineWatch is a script's stdout that closes seen once a line holding
// want has been written.
type lineWatch struct {
	mu   sync.Mutex
	buf  strings.Builder
	want string
	seen chan struct{}
}

func (l *lineWatch) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	had := strings.Contains(l.buf.String(), l.want)
	l.buf.Write(p)
	if !had && strings.Contains(l.buf.String(), l.want) {
		close(l.seen)
	}
	return len(p), nil
}

// TestInterruptReachesMainInABuiltin: Interrupt (Ctrl-C) ends a main
// that is inside a long matmul within a bound, not when it returns.
func TestInterruptReachesMainInABuiltin(t *testing.T) {
	dir := t.TempDir()
	script := `
def main(ctx):
    a = array.zeros([4096, 4096])
    print("started")
    array.matmul(a, a)
`
	if err := os.WriteFile(filepath.Join(dir, "main.star"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &lineWatch{want: "started", seen: make(chan struct{})}
	s := NewSession("a2a3sim", []int{0}, "thread", nil, out, out)
	done := make(chan error, 1)
	go func() { done <- s.RunFile(filepath.Join(dir, "main.star")) }()
	select {
	case <-out.seen:
	case err := <-done:
		t.Fatalf("main ended before it started the matmul: %v", err)
	}
	// Interrupt only once main is inside the builtin, where the
	// interpreter's own cancel cannot reach it.
	waitFor(t, "main to be inside matmul", func() bool {
		buf := make([]byte, 1<<20)
		return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("simpler/starlib/array.matmul("))
	})
	at := time.Now()
	s.Interrupt("RuntimeError: interrupted")
	err := <-done
	if took := time.Since(at); took > time.Second {
		t.Errorf("main returned %v after the interrupt", took)
	}
	if err == nil || !strings.Contains(err.Error(), "matmul: stopped: interrupted") {
		t.Errorf("main ended with %v", err)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}
