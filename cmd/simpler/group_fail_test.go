package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// groupFailScript: rank 0 of a group fails at once; rank 1 waits for a
// signal nobody sends: in comm.wait (scalar 1 = 1), which a stop reaches
// only by killing its process (process mode), or in a loop that reads the
// signal word, which a stop reaches at its next step.
const groupFailScript = `
def member(chip, args):
    comm = chip.comm(args.scalar(0))
    if comm.rank == 0:
        fail("ValueError: rank 0 gives up")
    if args.scalar(1) == 1:
        comm.wait(args.tensor(0), 1, cmp = ">=", timeout_s = 30)
    else:
        for i in range(100000000):
            if args.tensor(0).read()[0] >= 1:
                break

def main(ctx):
    w = Worker(level = 3, platform = ctx.platform, device_ids = [0, 1], mode = ctx.mode)
    w.register(member)
    w.init()
    how = 1 if ctx.mode == "process" else 0
    def orch(o, args, cfg):
        d = o.allocate_domain(name = "pair", workers = [0, 1], window_size = 4096, buffers = [
            CommBufferSpec(name = "ready", dtype = INT32, count = 1),
        ])
        o.submit_next_level_group(member, [TaskArgs(tensors = [(d[c].buffer("ready"), NO_DEP)],
            scalars = [d[c].device_ctx, how]) for c in d.workers], workers = d.workers)
        d.release()
    w.run(orch)
`

// A failed member of a group stops its sibling, which waits on a signal
// the failed one would have sent: the run fails with rank 0's error well
// before the sibling's own 30 s timeout, in thread and process mode, and
// the domain's windows are gone.
func TestGroupMemberFailureEndsTheRun(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"groupfail.star": groupFailScript})
	exe, _ := os.Executable()
	for _, mode := range []string{"thread", "process"} {
		run := exec.Command(exe, "run", "--mode", mode, filepath.Join(dir, "groupfail.star"))
		run.Env = cliEnv()
		var stderr strings.Builder
		run.Stderr = &stderr
		start := time.Now()
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		err := run.Wait()
		took := time.Since(start)
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 1 || !strings.Contains(stderr.String(), "ValueError: chip_worker 0 (device 0): task 1 running \"member\" failed: rank 0 gives up") {
			t.Errorf("%s: exit %d, stderr %q", mode, code, stderr.String())
		}
		if took > 10*time.Second {
			t.Errorf("%s: the run took %v; the sibling waited for its own timeout", mode, took)
		}
		t.Logf("%s: %v", mode, took)
		checkNoShm(t, run.Env)
		if ws, ok := run.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Errorf("%s: ended by %v", mode, ws.Signal())
		}
	}
}
