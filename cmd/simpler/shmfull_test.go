package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fullShmScripts each fill a small /dev/shm past its space with one kind
// of allocation: a host tensor, the heap ring (made at the first alloc),
// and a kernel's OUTPUT allocated at submit (from the heap ring too). ok
// is what a script prints before its allocation that cannot fit; op is
// the builtin the refusal names; size is the bytes it asks.
var fullShmScripts = []struct {
	name, ok, op string
	size         int
	src          string
}{
	{"host_tensor", "small ok", "host_tensor: host memory", 16 << 20, `
def main(ctx):
    a = host_tensor(shape = [1024])
    a.fill(1)
    print("small ok")
    b = host_tensor(shape = [4 << 20])
    b.fill(1)
    print("big made")
`},
	{"heap", "init ok", "alloc: heap ring", 64 << 20, `
def k(chip, args):
    pass

def main(ctx):
    w = Worker(level = 3, platform = ctx.platform, device_ids = [0], mode = ctx.mode)
    w.register(k)
    w.init()
    print("init ok")
    w.run(lambda o, a, c: o.alloc([16]))
    print("heap made")
    w.close()
`},
	{"kernel_output", "init ok", "submit_next_level: heap ring", 64 << 20, `
def k(chip, args):
    args.tensor(0).fill(1)

def main(ctx):
    w = Worker(level = 3, platform = ctx.platform, device_ids = [0], mode = ctx.mode)
    w.register(k)
    w.init()
    print("init ok")
    w.run(lambda o, a, c: o.submit_next_level(k, TaskArgs(tensors = [(make_tensor(0, [16], FLOAT32), OUTPUT)]), worker = 0))
    print("output made")
    w.close()
`},
}

// runOnSmallShm runs the CLI with args in a mount namespace of its own
// whose /dev/shm is a fresh 8 MiB tmpfs (the host's is not touched: the
// mount is private to the namespace), then lists what the run left in
// that /dev/shm on a last line "left: ...". It needs root (unshare -m).
func runOnSmallShm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := `mount -t tmpfs -o size=8m tmpfs /dev/shm || exit 99
"$@"; rc=$?
echo "left: $(ls -A /dev/shm)"
exit $rc`
	cmd := exec.Command("unshare", append([]string{"-m", "--propagation", "private", "sh", "-c", script, "sh", exe}, args...)...)
	cmd.Env = cliEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// Issue 23, point 5: on a full /dev/shm a host tensor, the heap ring and a
// kernel's output are refused where they are made, a RuntimeError naming
// the size asked and the space left, in thread and process mode: the
// script ends with status 1 (not SIGBUS and a Go stack) and leaves
// nothing in /dev/shm.
func TestFullShmIsARuntimeError(t *testing.T) {
	dir := t.TempDir()
	for _, s := range fullShmScripts {
		writeFiles(t, dir, map[string]string{s.name + ".star": s.src})
		for _, mode := range []string{"thread", "process"} {
			t.Run(s.name+"/"+mode, func(t *testing.T) {
				out, err := runOnSmallShm(t, "run", "--mode", mode, filepath.Join(dir, s.name+".star"))
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.ExitCode() != 1 {
					t.Fatalf("run: %v, want exit status 1\n%s", err, out)
				}
				want := regexp.MustCompile(fmt.Sprintf(`RuntimeError: %s: .*no room for %d bytes of shared memory \(\d+ bytes left\)`, regexp.QuoteMeta(s.op), s.size))
				if !strings.Contains(out, s.ok) || !want.MatchString(out) {
					t.Errorf("the output does not have %q then %q:\n%s", s.ok, want, out)
				}
				if strings.Contains(out, "SIGBUS") || strings.Contains(out, "goroutine ") {
					t.Errorf("the run crashed:\n%s", out)
				}
				if !strings.Contains(out, "left: \n") {
					t.Errorf("the run left objects in /dev/shm:\n%s", out)
				}
			})
		}
	}
}
