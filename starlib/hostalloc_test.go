package starlib

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// runHostScript runs src as main.star in a fresh session and returns the
// session (closed by the test's cleanup) and the script's error.
func runHostScript(t *testing.T, src string) (*Session, string, error) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "main.star")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	s := NewSession("a2a3sim", []int{0, 1}, "thread", nil, &out, io.Discard)
	err := s.RunFile(path)
	t.Cleanup(func() { s.Close() })
	return s, out.String(), err
}

// 10 000 dropped 64 KiB host tensors leave shared memory flat: each is
// reclaimed once unreachable (640 MiB without that). When the collector
// runs decides how many wait to be reclaimed at the end (up to about
// 160 MiB seen under load), so the bound is half the leak.
func TestDroppedHostTensorsAreReclaimed(t *testing.T) {
	s, _, err := runHostScript(t, `
def main(ctx):
    for i in range(10000):
        t = host_tensor(shape = [16384])
`)
	if err != nil {
		t.Fatal(Backtrace(err))
	}
	// The collector's cleanups run on a goroutine of their own: give them
	// a bounded while (a leak keeps all 640 MiB however long it waits).
	n := s.space.Bytes()
	for deadline := time.Now().Add(3 * time.Second); n > 320<<20 && time.Now().Before(deadline); n = s.space.Bytes() {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n > 320<<20 {
		t.Errorf("after 10000 dropped tensors the session holds %d MiB of shared memory", n>>20)
	}
}

// free gives the memory back at once; using the tensor or a view of it
// afterwards is a RuntimeError, and a run in flight refuses the free.
func TestHostTensorFree(t *testing.T) {
	_, out, err := runHostScript(t, `
def slow(chip, args):
    n = 0
    for i in range(100000):
        n += 1
    args.tensor(0).fill(2.0)

def main(ctx):
    w = Worker(level = 3, platform = ctx.platform, device_ids = [0])
    w.register(slow)
    w.init()
    x = host_tensor(shape = [4])
    v = x.view(shape = [2])
    r = w.submit(lambda o, a, c: o.submit_next_level(slow, TaskArgs(tensors = [(x, OUTPUT_EXISTING)]), worker = 0))
    print("free in flight:", catch(x.free))
    r.wait()
    print(x.read().tolist())
    print("free:", x.free(), x.free())
    print("read:", catch(x.read))
    print("view:", catch(v.read))
    print("args:", catch(TaskArgs, tensors = [(x, INPUT)]))
    w.close()
`)
	if err != nil {
		t.Fatal(Backtrace(err))
	}
	want := `free in flight: RuntimeError: free: the tensor is used by a run still in flight; wait for it first
[2.0, 2.0, 2.0, 2.0]
free: None None
read: RuntimeError: read: the tensor was freed
view: RuntimeError: read: the tensor was freed
args: RuntimeError: add_tensor: the tensor was freed
`
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}
