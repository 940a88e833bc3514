package proc

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/hal/dtype"
	"simpler/hal/shm"
)

// Host tensor memory in process mode (issue 23, points 6 and 7): what the
// parent reclaims must not stay in /dev/shm or in a chip child's
// mappings.

// shmBytes is the memory the objects named under the prefixes hold in
// /dev/shm: their allocated blocks, not their sizes.
func shmBytes(t *testing.T, prefixes ...string) int64 {
	t.Helper()
	var n int64
	for _, prefix := range prefixes {
		names, err := shm.Leftovers(prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			var st unix.Stat_t
			if err := unix.Stat("/dev/shm/"+name, &st); err == nil { // one may go while we look
				n += st.Blocks * 512
			}
		}
	}
	return n
}

// childMemory is what a child process maps of shared memory: the
// objects of simpler in its /proc/<pid>/maps (named or reclaimed), and
// its resident shared memory (RssShmem, in bytes).
type childMemory struct {
	objects  int
	rssShmem int64
}

func readChildMemory(t *testing.T, pid int) childMemory {
	t.Helper()
	var m childMemory
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(string(maps), "\n") {
		if i := strings.Index(line, "/dev/shm/simpler-"); i >= 0 && !seen[line[i:]] {
			seen[line[i:]] = true
			m.objects++
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "RssShmem:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("RssShmem %q: %v", v, err)
			}
			m.rssShmem = kb << 10
		}
	}
	return m
}

// add1On runs add1 on chip 0 over the n int64 elements at addr.
func add1On(t *testing.T, w *engine.Worker, addr uint64, n int) {
	t.Helper()
	x := engine.Tensor{Addr: addr, Shape: []int{n}, DType: dtype.Int64}
	mustRun(t, w, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(kernel(t, w, "add1"), mkArgs(x, engine.InOut), nil, 0)
		return err
	})
}

// Point 7: 1,000 host buffers of 64 KiB, each used by a task on a chip
// child and then freed by the parent. The child drops its mapping of
// each one the parent reclaimed, so its mapped objects and resident
// shared memory stay flat (they grew by one object and 64 KiB per buffer
// when the child kept every mapping: +61 MiB per 1,000).
func TestChildDropsReclaimedMappings(t *testing.T) {
	w, log := procWorker(t, 1, 0)
	register(t, w, procKernel{"add1"})
	pid := log.get(t, "chip_worker 0 (device 0)").pid()
	const n, warm, iterations = 64 << 10, 10, 1000
	var base childMemory
	start := time.Now()
	for i := range iterations {
		b, err := w.HostBuffers().Create(n)
		if err != nil {
			t.Fatal(err)
		}
		mem, err := hostmem.Resolve(b.Addr(), n)
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < n; j += 4096 {
			mem[j] = 1 // every page resident, as a real tensor's
		}
		add1On(t, w, b.Addr(), n/8)
		if err := w.HostBuffers().Free(b); err != nil {
			t.Fatal(err)
		}
		if i+1 == warm {
			base = readChildMemory(t, pid)
		}
	}
	after := readChildMemory(t, pid)
	t.Logf("%d freed 64 KiB buffers in %v: child %d after %d maps %d objects, RssShmem %d bytes; after %d: %d objects, %d bytes",
		iterations, time.Since(start).Round(time.Millisecond), pid, warm, base.objects, base.rssShmem, iterations, after.objects, after.rssShmem)
	if after.objects > base.objects+1 {
		t.Errorf("the child maps %d objects after %d freed buffers, %d after %d", after.objects, iterations, base.objects, warm)
	}
	if grew := after.rssShmem - base.rssShmem; grew > 1<<20 {
		t.Errorf("the child's resident shared memory grew by %d bytes over %d freed buffers", grew, iterations-warm)
	}
}

// Point 6 in process mode: a loop that keeps a 64-byte host tensor and
// drops a 64 KiB one each iteration, the temporary used by a task on a
// chip child. /dev/shm (the parent's objects and the child's) stays
// within 1 MiB per 1,000 iterations, and the child maps no more objects
// at the end than early on.
func TestKeepSmallDropLargeProcess(t *testing.T) {
	sp := newSpace(t)
	w, log := procWorker(t, 1, 0)
	register(t, w, procKernel{"add1"})
	pid := log.get(t, "chip_worker 0 (device 0)").pid()
	prefixes := []string{shm.Prefix()} // the chip child's objects are under its parent's prefix
	const iterations, warm = 1000, 10
	var kept []uint64
	var base childMemory
	var baseShm int64
	start := time.Now()
	for i := range iterations {
		a, m, err := sp.Alloc(64)
		if err != nil {
			t.Fatal(err)
		}
		m[0] = byte(i)
		kept = append(kept, a)
		tmp, _, err := sp.Alloc(64 << 10)
		if err != nil {
			t.Fatal(err)
		}
		add1On(t, w, tmp, 8192)
		if err := sp.Free(tmp); err != nil {
			t.Fatal(err)
		}
		if i+1 == warm {
			base, baseShm = readChildMemory(t, pid), shmBytes(t, prefixes...)
		}
	}
	after, afterShm := readChildMemory(t, pid), shmBytes(t, prefixes...)
	t.Logf("%d iterations in %v: /dev/shm %d -> %d bytes; the child maps %d -> %d objects; the space holds %d bytes in %d segment(s)",
		iterations, time.Since(start).Round(time.Millisecond), baseShm, afterShm, base.objects, after.objects, sp.Bytes(), sp.Segments())
	if afterShm-baseShm > 1<<20 {
		t.Errorf("/dev/shm grew by %d bytes over %d iterations", afterShm-baseShm, iterations-warm)
	}
	if after.objects > base.objects {
		t.Errorf("the child maps %d objects after %d iterations, %d after %d", after.objects, iterations, base.objects, warm)
	}
	if len(kept) != iterations {
		t.Fatal("lost a kept tensor")
	}
}

// Point 8: host memory a kernel makes in a chip child (host_tensor() in a
// Starlark kernel) is the child's own, under the prefix it shares with
// its parent, so nobody else would remove it while the parent lives: the
// child releases its resolver, which holds it, when it shuts down, and
// nothing it made is left in /dev/shm once the worker is closed.
func TestKernelHostMemoryGoesWithChild(t *testing.T) {
	chunks := func() []string {
		names, _ := shm.Leftovers(shm.Prefix() + "hostchunk-")
		return names
	}
	before := chunks()
	made := func() (n []string) {
		for _, name := range chunks() {
			if !slices.Contains(before, name) {
				n = append(n, name)
			}
		}
		return n
	}
	cfg := engine.Config{Level: 3, DeviceIDs: []int{0}, Spawn: &spawnLog{}}
	processMode(&cfg)
	w, err := engine.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Init(); err != nil {
		w.Close()
		t.Fatal(err)
	}
	register(t, w, procKernel{"hostalloc"})
	mustRun(t, w, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(kernel(t, w, "hostalloc"), &engine.TaskArgs{}, nil, 0)
		return err
	})
	if left := made(); len(left) != 1 {
		w.Close()
		t.Fatalf("the kernel's host memory in the child: %v, want one chunk", left)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if left := made(); len(left) > 0 {
		t.Errorf("the closed chip child left %v in /dev/shm", left)
		for _, name := range left {
			os.Remove("/dev/shm/" + name)
		}
	}
}
