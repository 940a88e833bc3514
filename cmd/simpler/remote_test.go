package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startRemoteDaemon runs `simpler remote-l3-worker` on a free loopback
// port and returns it with its address, read from its own ready line.
func startRemoteDaemon(t *testing.T, env ...string) (*exec.Cmd, string) {
	t.Helper()
	d, addr, _ := startRemoteDaemonLog(t, env...)
	return d, addr
}

// startRemoteDaemonLog is startRemoteDaemon that also keeps what the
// daemon writes to stderr (its log).
func startRemoteDaemonLog(t *testing.T, env ...string) (*exec.Cmd, string, *lockedBuffer) {
	t.Helper()
	return startDaemonWith(t, nil, env)
}

// startDaemonWith runs `simpler remote-l3-worker` with flags, on a free
// loopback port, in cliEnv(env...), until the test ends; it returns the
// process, its address (from its ready line) and its log.
func startDaemonWith(t *testing.T, flags, env []string) (*exec.Cmd, string, *lockedBuffer) {
	t.Helper()
	exe, _ := os.Executable()
	d := exec.Command(exe, append([]string{"remote-l3-worker", "--listen", "127.0.0.1:0"}, flags...)...)
	d.Env = cliEnv(env...)
	log := &lockedBuffer{}
	d.Stderr = io.MultiWriter(os.Stderr, log)
	out, err := d.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Process.Signal(os.Interrupt)
		d.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "simpler remote-l3-worker: listening on ")
	if err != nil || !ok {
		t.Fatalf("daemon did not start: %q %v", line, err)
	}
	return d, addr, log
}

// A daemon killed while its node runs a task takes its session with it:
// the run fails with a connection error within the session timeout, and
// the script still closes cleanly.
func TestRemoteDaemonKilledMidTask(t *testing.T) {
	// A daemon killed outright leaves its token and socket: give it a
	// runtime directory of its own, removed with the test.
	runtimeEnv := "XDG_RUNTIME_DIR=" + t.TempDir()
	daemon, addr := startRemoteDaemon(t, runtimeEnv)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.star": `
def spin(chip, args):
    args.tensor(0).fill(1)
    n = 0
    for i in range(100000000):
        n += 1

def node(o, args, cfg):
    o.submit_next_level(spin, TaskArgs(tensors = [(args.tensor(0), OUTPUT_EXISTING)]), worker = 0)

def main(ctx):
    w = Worker(level = 4, platform = ctx.platform, remote_session_timeout_s = 2)
    w.add_remote_worker(endpoint = ctx.argv[0], platform = ctx.platform, device_ids = [0])
    w.register(spin)
    w.register(node)
    w.init()
    h = w.remote_malloc(worker = 0, nbytes = 4)
    run = w.submit(lambda o, a, c: o.submit_next_level(node, TaskArgs(tensors = [(RemoteTensorRef(h, shape = [1]), OUTPUT_EXISTING)]), worker = 0))
    print("submitted")
    print("run:", catch(run.wait))
    w.close()
    print("closed")
`})
	exe, _ := os.Executable()
	run := exec.Command(exe, "run", filepath.Join(dir, "main.star"), addr)
	run.Env = cliEnv(runtimeEnv)
	stdout, err := run.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	run.Stderr = os.Stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	if line, _ := r.ReadString('\n'); strings.TrimSpace(line) != "submitted" {
		t.Fatalf("script said %q", line)
	}
	awaitSpinning(t, "the kernel to spin on the node", func() []int { return childPids(daemon.Process.Pid) })
	// The task is running on the node: kill the daemon outright.
	daemon.Process.Signal(syscall.SIGKILL)
	done := make(chan error, 1)
	var rest strings.Builder
	go func() {
		for {
			line, err := r.ReadString('\n')
			rest.WriteString(line)
			if err != nil {
				done <- run.Wait()
				return
			}
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("script failed: %v\n%s", err, rest.String())
		}
	case <-time.After(30 * time.Second):
		run.Process.Kill()
		t.Fatal("the run hung after its daemon was killed")
	}
	out := rest.String()
	if !strings.Contains(out, "run: ") || !strings.Contains(out, "remote_worker 0") || !strings.Contains(out, "closed") {
		t.Fatalf("output:\n%s", out)
	}
	t.Logf("script output:\n%s", out)
	checkNoShm(t, run.Env)
}
