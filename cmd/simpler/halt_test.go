package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// modesScript checks, in whatever mode it runs in, what must read the
// same in every mode: Worker() refused inside a kernel and a SUB
// callable, window_size past a chip's memory refused before any backend
// work, and a kernel blocked in comm.wait or comm.barrier (its own
// timeout 120 s) or in a long matmul ended by its task's deadline, and
// one blocked in comm.wait by cancel().
const modesScript = `
def make_worker(chip, args):
    Worker(level = 3, device_ids = [0])

def sub_make_worker(args):
    Worker(level = 3, device_ids = [0])

def blocked_wait(chip, args):
    comm = chip.comm(args.scalar(0))
    word = comm.window(comm.rank).view(shape = [1], dtype = INT64)
    args.tensor(0).fill(1)
    comm.wait(word, 1, timeout_s = 120)

def blocked_barrier(chip, args):
    chip.comm(args.scalar(0)).barrier(timeout_s = 120)

def long_matmul(chip, args):
    a = array.zeros([4096, 4096])
    array.matmul(a, a)

def main(ctx):
    w = Worker(level = 3, device_ids = [0, 1], num_sub_workers = 1, mode = ctx.mode)
    for f in [make_worker, sub_make_worker, blocked_wait, blocked_barrier, long_matmul]:
        w.register(f)
    w.init()
    print("kernel:", catch(w.run, lambda o, a, c: o.submit_next_level(make_worker, TaskArgs(), worker = 0)))
    print("sub:", catch(w.run, lambda o, a, c: o.submit_sub(sub_make_worker, TaskArgs())))
    print("window:", catch(w.run, lambda o, a, c: o.allocate_domain(name = "big", workers = [0, 1], window_size = 1 << 50)))
    print("live:", w.live_domains)

    # Device memory of chip 0 outlives the stops below only if its chip
    # process was not killed for a kernel that would not stop.
    kept = w.malloc(4, worker_id = 0)
    w.copy_to(kept, host_tensor(data = [7.0]), 4)
    flag = host_tensor(shape = [1])
    def blocked(config, kernel = blocked_wait):
        def orch(o, a, c):
            d = o.allocate_domain(name = "d", workers = [0, 1], window_size = 64)
            o.submit_next_level(kernel, TaskArgs(tensors = [(flag, OUTPUT_EXISTING)], scalars = [d[0].device_ctx]),
                                config = config, worker = 0)
        return orch
    print("deadline:", catch(w.run, blocked(CallConfig(timeout_s = 1))))
    print("barrier deadline:", catch(w.run, blocked(CallConfig(timeout_s = 0.5), blocked_barrier)))
    print("matmul deadline:", catch(w.run, blocked(CallConfig(timeout_s = 0.5), long_matmul)))
    flag.fill(0)
    r = w.submit(blocked(CallConfig()))
    for i in range(10000000):
        if flag.read()[0] == 1.0:
            break
    r.cancel()
    print("cancel:", catch(r.wait))
    back = host_tensor(shape = [1])
    w.copy_from(back, kept, 4)
    print("memory kept:", back.read().tolist())
    w.close()
`

// TestSameRefusalsAndStopsInEveryMode: Worker() inside a kernel or a SUB
// callable is refused with the same reason in thread and process mode
// (in thread mode it used to make a Worker, leaking its processes; in
// process mode it failed for want of a launcher); window_size = 1 << 50
// is the same ValueError, naming the bound, in both; and a kernel
// blocked in comm.wait, comm.barrier or a matmul ends within a bound of
// its deadline (and in comm.wait, of a cancel) in both, a chip process's as a thread's: the chip process is not killed
// for it (its device memory is kept).
func TestSameRefusalsAndStopsInEveryMode(t *testing.T) {
	t.Setenv(asCLI, "1") // children started through os.Executable() are this binary
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"modes.star": modesScript})
	outs := map[string]string{}
	for _, mode := range []string{"thread", "process"} {
		start := time.Now()
		code, out, errs := runCLI(t, "run", "--devices", "0,1", "--mode", mode, filepath.Join(dir, "modes.star"))
		took := time.Since(start)
		if code != 0 {
			t.Fatalf("%s mode: exit %d\nstdout:\n%s\nstderr:\n%s", mode, code, out, errs)
		}
		// 2 s of deadlines, and start-up; the waits' own timeouts are 120 s.
		if took > 8*time.Second {
			t.Errorf("%s mode: took %v", mode, took)
		}
		for _, want := range []string{
			"kernel: RuntimeError: chip_worker 0 (device 0): task 1 running \"make_worker\" failed: Worker() inside a chip kernel: a task runs on a Worker and may not make one",
			"sub: RuntimeError: sub_worker 0: task 1 running \"sub_make_worker\" failed: Worker() inside a SUB callable: a task runs on a Worker and may not make one",
			"window: ValueError: allocate_domain: window_size=1125899906842624 exceeds the 68719476736 bytes of device memory of a a2a3sim chip\n",
			"live: {}\n",
			"deadline: TimeoutError: chip_worker 0 (device 0): task 1 running \"blocked_wait\" failed: past its deadline of 1s",
			"barrier deadline: TimeoutError: chip_worker 0 (device 0): task 1 running \"blocked_barrier\" failed: past its deadline of 500ms",
			"matmul deadline: TimeoutError: chip_worker 0 (device 0): task 1 running \"long_matmul\" failed: past its deadline of 500ms",
			"cancel: RuntimeError: run 7 cancelled: task 1 stopped while running\n",
			"memory kept: [7.0]\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s mode: output lacks %q:\n%s", mode, want, out)
			}
		}
		outs[mode] = out
	}
	// Backtraces aside, the two modes print the same lines.
	for _, prefix := range []string{"kernel:", "sub:", "window:"} {
		if a, b := lineOf(outs["thread"], prefix), lineOf(outs["process"], prefix); a != b {
			t.Errorf("the modes differ:\n  thread:  %s\n  process: %s", a, b)
		}
	}
}

// lineOf is the first line of out that starts with prefix, up to its
// first " (at " (where a kernel's position follows).
func lineOf(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			l, _, _ = strings.Cut(l, " (at ")
			return l
		}
	}
	return ""
}

// remoteScript is modesScript's checks on a remote level-3 node served by
// a real remote-l3-worker daemon: the node's kernel blocked in comm.wait
// is ended by its deadline and the node takes the next run (it was not
// ended for a kernel that would not stop), Worker() in its kernel is
// refused as shipped code (a task there too), and an oversized window as
// it is locally.
const remoteScript = `# simpler-daemons: 1
def blocked_wait(chip, args):
    comm = chip.comm(args.scalar(0))
    word = comm.window(comm.rank).view(shape = [1], dtype = INT64)
    comm.wait(word, 1, timeout_s = 120)

def make_worker(chip, args):
    Worker(level = 3, device_ids = [0])

def noop(chip, args):
    pass

def node_blocked(o, args, config):
    d = o.allocate_domain(name = "d", workers = [0, 1], window_size = 64)
    o.submit_next_level(blocked_wait, TaskArgs(scalars = [d[0].device_ctx]), config = CallConfig(timeout_s = 1), worker = 0)

def node_make_worker(o, args, config):
    o.submit_next_level(make_worker, TaskArgs(), worker = 0)

def node_big_window(o, args, config):
    o.allocate_domain(name = "big", workers = [0, 1], window_size = 1 << 50)

def node_noop(o, args, config):
    o.submit_next_level(noop, TaskArgs(), worker = 1)

def main(ctx):
    w = Worker(level = 4, platform = ctx.platform)
    w.add_remote_worker(endpoint = ctx.argv[0], platform = ctx.platform, device_ids = [0, 1])
    for f in [blocked_wait, make_worker, noop, node_blocked, node_make_worker, node_big_window, node_noop]:
        w.register(f)
    w.init()
    on_node = lambda fn: lambda o, a, c: o.submit_next_level(fn, TaskArgs(), worker = 0)
    print("deadline:", catch(w.run, on_node(node_blocked)))
    print("next:", w.run(on_node(node_noop)))
    print("kernel:", catch(w.run, on_node(node_make_worker)))
    print("window:", catch(w.run, on_node(node_big_window)))
    w.close()
`

// TestRemoteNodeStopsAndRefusals: on a node behind a real daemon, a
// kernel blocked in comm.wait with its own 120 s timeout ends at its 1 s
// deadline and the node goes on; Worker() in a kernel is refused, and
// window_size = 1 << 50 with the local reason.
func TestRemoteNodeStopsAndRefusals(t *testing.T) {
	t.Setenv(asCLI, "1") // the daemon is this binary
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"remote.star": remoteScript})
	start := time.Now()
	code, out, errs := runCLI(t, "run", "--devices", "0,1", filepath.Join(dir, "remote.star"))
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if took > 10*time.Second {
		t.Errorf("took %v", took)
	}
	for _, want := range []string{
		"deadline: TimeoutError: ",
		"running \"blocked_wait\" failed: past its deadline of 1s",
		"next: None\n",
		"kernel: RuntimeError: ",
		"Worker(): code shipped to a remote node runs as a task there, not as a host program",
		"window: ValueError: ",
		"allocate_domain: window_size=1125899906842624 exceeds the 68719476736 bytes of device memory of a a2a3sim chip",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
