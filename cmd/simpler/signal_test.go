package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const interruptScript = `
def spin(chip, args):
    args.tensor(0).fill(1)
    while True:
        pass

def main(ctx):
    w = Worker(level = 3, platform = ctx.platform, device_ids = [0, 1], mode = ctx.mode)
    w.register(spin)
    w.init()
    big = host_tensor(shape = [64 * 1024])   # 256 KiB of shared memory
    x = host_tensor(shape = [1])
    r = w.submit(lambda o, a, c: o.submit_next_level(spin, TaskArgs(tensors = [(x, OUTPUT_EXISTING)]), worker = 0))
    for i in range(10000000):
        if x.read()[0] == 1.0:
            break
    print("started")
    r.wait()
`

// A signal to simpler run mid-run cancels the runs, closes everything
// within the bound, writes the trace so far and exits 128+signal, with
// nothing left in /dev/shm and no child process running. A terminal's
// Ctrl-C goes to the whole process group, the chip processes too (group).
func TestRunInterrupted(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"spin.star": interruptScript})
	exe, _ := os.Executable()
	for _, c := range []struct {
		sig   syscall.Signal
		mode  string
		code  int
		group bool
	}{{syscall.SIGINT, "thread", 130, false}, {syscall.SIGTERM, "process", 143, false}, {syscall.SIGHUP, "thread", 129, false},
		{syscall.SIGINT, "process", 130, false}, {syscall.SIGINT, "process", 130, true}} {
		trace := filepath.Join(dir, "trace-"+c.mode+".json")
		run := exec.Command(exe, "run", "--mode", c.mode, "--trace", trace, filepath.Join(dir, "spin.star"))
		run.Env = cliEnv()
		run.SysProcAttr = &syscall.SysProcAttr{Setpgid: c.group}
		stderr := startUntil(t, run, "started", c.sig.String())
		kids := childPids(run.Process.Pid)
		start := time.Now()
		if c.group {
			syscall.Kill(-run.Process.Pid, c.sig)
		} else {
			run.Process.Signal(c.sig)
		}
		err := run.Wait()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != c.code || !strings.Contains(stderr.String(), "interrupted by "+signalName(c.sig)+": ") || strings.Contains(stderr.String(), "exited") {
			t.Errorf("%v in %s mode: exit %d (%v), stderr %q; want %d", c.sig, c.mode, code, err, stderr.String(), c.code)
		}
		if el := time.Since(start); el > 10*time.Second {
			t.Errorf("%v: exited %v after the signal", c.sig, el)
		}
		checkNoShm(t, run.Env)
		for _, k := range kids {
			if syscall.Kill(k, 0) == nil {
				t.Errorf("%v: child %d still runs", c.sig, k)
				syscall.Kill(k, syscall.SIGKILL)
			}
		}
		b, err := os.ReadFile(trace)
		var events any
		if err != nil || json.Unmarshal(b, &events) != nil {
			t.Errorf("%v: the trace so far: %v (%d bytes)", c.sig, err, len(b))
		}
	}
}

// startUntil starts run and waits for the first line it prints to be
// want, which a script prints once it is where the test needs it; the
// run's stderr is kept in the builder returned. Otherwise it ends run and
// fails the test, naming what, with what the script said.
func startUntil(t *testing.T, run *exec.Cmd, want, what string) *strings.Builder {
	t.Helper()
	out, _ := run.StdoutPipe()
	stderr := &strings.Builder{}
	run.Stderr = stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != want {
		run.Process.Kill()
		run.Wait()
		t.Fatalf("%s: the script said %q (%s)", what, line, stderr.String())
	}
	return stderr
}
