package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"simpler/hal/shm"
)

// watchChildren polls the live children of pid until done is closed and
// returns every one it saw: a child's shared memory is named under its
// own pid, which the test learns only while it lives.
func watchChildren(pid int, done <-chan struct{}) <-chan map[int]bool {
	out := make(chan map[int]bool, 1)
	go func() {
		seen := map[int]bool{}
		for {
			for _, kid := range childPids(pid) {
				seen[kid] = true
			}
			select {
			case <-done:
				out <- seen
				return
			case <-time.After(2 * time.Millisecond): // polling the process table
			}
		}
	}()
	return out
}

// kernelHostScript makes a host tensor inside a kernel, run 20 times on
// worker 0 of w, then closes w; %s is the worker's making.
const kernelHostScript = `
def make(chip, args):
    t = host_tensor(shape = [16])
    t.fill(1)
    if args.scalar(0) == 0:
        print("a kernel made a host tensor")

def node(o, args, cfg):
    o.submit_next_level(make, TaskArgs(scalars = [args.scalar(0)]), worker = 0)

def main(ctx):
    %s
    w.register(make)
    w.init()
    for i in range(20):
        w.run(lambda o, a, c: o.submit_next_level(%s, TaskArgs(scalars = [i]), worker = 0))
    w.close()
    print("closed")
`

// noShmOf fails if any of pids left shared memory behind.
func noShmOf(t *testing.T, what string, pids map[int]bool) {
	t.Helper()
	for pid := range pids {
		if left, _ := shm.Leftovers(fmt.Sprintf("simpler-%d-", pid)); len(left) > 0 {
			t.Errorf("%s %d left %v in /dev/shm", what, pid, left)
			for _, name := range left {
				os.Remove("/dev/shm/" + name)
			}
		}
	}
}

// Issue 23, point 8: host_tensor() inside a kernel in a chip child
// process leaves nothing of the child's in /dev/shm after the run (the
// child's resolver session, which holds it, was never closed).
func TestKernelHostTensorProcessMode(t *testing.T) {
	dir := t.TempDir()
	src := fmt.Sprintf(kernelHostScript, `w = Worker(level = 3, platform = ctx.platform, device_ids = [0], mode = "process")`, "make")
	writeFiles(t, dir, map[string]string{"main.star": src})
	exe, _ := os.Executable()
	run := exec.Command(exe, "run", filepath.Join(dir, "main.star"))
	run.Env = cliEnv()
	var out bytes.Buffer
	run.Stdout, run.Stderr = &out, &out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	seen := watchChildren(run.Process.Pid, done)
	err := run.Wait()
	close(done)
	kids := <-seen
	if err != nil || !strings.Contains(out.String(), "a kernel made a host tensor") || !strings.Contains(out.String(), "closed") {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if len(kids) == 0 {
		t.Fatal("no chip child process was seen while the script ran")
	}
	noShmOf(t, "chip child", kids)
	checkNoShm(t, run.Process.Pid)
}

// The same in a remote session: a kernel on a remote node's chip makes a
// host tensor in the session process, which leaves nothing in /dev/shm
// once it has ended.
func TestKernelHostTensorRemoteSession(t *testing.T) {
	d, addr := startRemoteDaemon(t)
	dir := t.TempDir()
	src := fmt.Sprintf(kernelHostScript, `w = Worker(level = 4, platform = ctx.platform)
    w.add_remote_worker(endpoint = ctx.argv[0], platform = ctx.platform, device_ids = [0])
    w.register(node)`, "node")
	writeFiles(t, dir, map[string]string{"main.star": src})
	exe, _ := os.Executable()
	run := exec.Command(exe, "run", filepath.Join(dir, "main.star"), addr)
	run.Env = cliEnv()
	var out bytes.Buffer
	run.Stdout, run.Stderr = &out, &out
	done := make(chan struct{})
	seen := watchChildren(d.Process.Pid, done)
	err := run.Run()
	start := time.Now()
	for len(childPids(d.Process.Pid)) > 0 && time.Since(start) < 10*time.Second {
		time.Sleep(10 * time.Millisecond) // polling the process table: the session ends after its parent closed it
	}
	close(done)
	sessions := <-seen
	if err != nil || !strings.Contains(out.String(), "closed") {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if left := childPids(d.Process.Pid); len(left) > 0 {
		t.Fatalf("sessions still running 10 s after their parent closed: %v", left)
	}
	if len(sessions) == 0 {
		t.Fatal("no session process was seen while the script ran")
	}
	noShmOf(t, "session process", sessions)
	checkNoShm(t, run.Process.Pid)
}
