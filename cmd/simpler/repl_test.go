package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.starlark.net/starlark"
)

// replEnv runs the REPL with its history in a temporary directory and
// without colour.
func replEnv(t *testing.T) (env []string, state string) {
	state = t.TempDir()
	return cliEnv("XDG_STATE_HOME="+state, "NO_COLOR=1", "TERM=xterm"), state
}

func TestReplTabCompletesAttributes(t *testing.T) {
	env, state := replEnv(t)
	p := startPTY(t, env, "repl", "--devices", "0,1")
	p.expect("ready")
	p.expect(">>> ")
	p.send("w.reg\t")
	p.expect("w.register")
	p.send("\r")
	p.expect("<built-in function register>")
	p.expect(">>> ")
	p.send("host_ten\t")
	p.expect("host_tensor")
	p.send("(shape = [2]).shape\r")
	p.expect("(2,)")
	p.expect(">>> ")
	p.send("\x04") // Ctrl-D
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d; output:\n%s", code, p.output())
	}
	checkNoShm(t, p.cmd.Process.Pid)
	hist, err := os.ReadFile(filepath.Join(state, "simpler", "history"))
	if err != nil {
		t.Fatalf("no history file: %v", err)
	}
	if !strings.Contains(string(hist), "w.register") || !strings.Contains(string(hist), "host_tensor(shape = [2]).shape") {
		t.Errorf("history lacks the completed lines:\n%s", hist)
	}
}

func TestReplDomainsAfterAllocation(t *testing.T) {
	env, _ := replEnv(t)
	p := startPTY(t, env, "repl", "--devices", "0,1")
	p.expect(">>> ")
	p.send(":begin\r")
	p.expect("open")
	p.expect("(run ")
	p.send(`d = orch.allocate_domain(name = "ring", workers = [0, 1], window_size = 4096, buffers = [CommBufferSpec(name = "x", dtype = FLOAT32, count = 16)])` + "\r")
	p.expect(">>> ")
	p.send(":domains\r")
	p.expect(`"ring"  live`)
	p.expect("workers [0, 1], window 4096 bytes")
	p.expect("rank 0: chip_worker 0 (device 0)  window base 0x")
	p.expect("buffer x")
	p.expect("64 bytes (16 × float32)")
	p.expect("rank 1: chip_worker 1 (device 1)  window base 0x")
	p.expect(">>> ")
	p.send("d.release()\r")
	p.expect(">>> ")
	p.send(":domains\r")
	p.expect(`"ring"  released`)
	p.expect(">>> ")
	p.send(":end\r")
	p.expect("ended")
	p.expect(">>> ")
	p.send(":domains\r")
	p.expect(`"ring"  freed`)
	p.expect(">>> ")
	p.send(":workers\r")
	p.expect("Worker 1 (w): level 3, platform a2a3sim")
	p.expect("chip_worker 1: device 1")
	p.expect("sub_worker 0")
	p.expect(">>> ")
	p.send("\x04")
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d; output:\n%s", code, p.output())
	}
	checkNoShm(t, p.cmd.Process.Pid)
}

func TestReplCtrlCCancelsTheStatement(t *testing.T) {
	env, _ := replEnv(t)
	p := startPTY(t, env, "repl", "--devices", "0")
	p.expect(">>> ")
	p.send("def spin():\r")
	p.expect("... ")
	p.send("    print(\"spinning\")\r")
	p.send("    n = 0\r")
	p.send("    while True:\r")
	p.send("        n += 1\r")
	p.send("\r")
	p.expect(">>> ")
	p.send("spin()\r")
	p.expect("spinning")
	p.send("\x03") // Ctrl-C: SIGINT from the terminal
	p.expect("cancelled")
	p.expect(">>> ")
	p.send("1 + 41\r")
	p.expect("42")
	p.expect(">>> ")
	p.send("\x04")
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d; the REPL did not survive Ctrl-C; output:\n%s", code, p.output())
	}
	checkNoShm(t, p.cmd.Process.Pid)
}

// TestReplPiped drives the REPL through a pipe: no prompts, the same
// statements, one run per orch statement, and errors on stderr.
func TestReplPiped(t *testing.T) {
	input := `def double(chip, args):
    args.tensor(1).write(args.tensor(0).read() * 2.0)

w.register(double)
x = host_tensor(data = array.arange(4, FLOAT32))
y = host_tensor(shape = [4])
orch.submit_next_level(double, TaskArgs(tensors = [(x, INPUT), (y, OUTPUT)]), worker = 1)
y.read().tolist()
tmp = orch.allocate_domain(name = "tmp", window_size = 1024)
tmp.freed
:domains
no_such_name
:reset
y
w.level
def orch(o, args, cfg):
    return "mine"

w.run(orch)
def triple(x):
    return 3 * x
triple(5)
for i in range(2):
    print("loop", i)`
	cmd := exec.Command(os.Args[0], "repl", "--devices", "0-1")
	cmd.Env = cliEnv("NO_COLOR=1")
	cmd.Dir = t.TempDir()
	cmd.Stdin = strings.NewReader(input)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	checkNoShm(t, cmd.Process.Pid)
	wantOut := []string{
		"CallableHandle(double, sha256:",
		"[0.0, 2.0, 4.0, 6.0]",
		"True", // swept at the statement's own run fence
		`"tmp"  freed  (Worker 1, allocation 1, run 2)`,
		"\n3\n",            // w.level after :reset
		`"mine"`,           // a global named orch is the user's, not the REPL's
		"\n15\n",           // a block ended by an unindented line, which runs next
		"loop 0\nloop 1\n", // the input ended inside a block
	}
	out := stdout.String()
	at := 0
	for _, w := range wantOut {
		i := strings.Index(out[at:], w)
		if i < 0 {
			t.Fatalf("stdout lacks %q after offset %d:\n%s\nstderr:\n%s", w, at, out, stderr.String())
		}
		at += i + len(w)
	}
	if strings.Contains(out, ">>>") {
		t.Errorf("prompts on a pipe:\n%s", out)
	}
	errs := stderr.String()
	for _, w := range []string{"undefined: no_such_name", "undefined: y"} {
		if !strings.Contains(errs, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errs)
		}
	}
	if strings.Contains(errs, "\x1b[") {
		t.Errorf("colour on a pipe with NO_COLOR:\n%q", errs)
	}
}

func TestComplete(t *testing.T) {
	globals := starlark.StringDict{
		"w":         starlark.NewDict(0), // any value with attributes
		"host_ten":  starlark.None,
		"host_tens": starlark.None,
		"_private":  starlark.None,
		"s":         starlark.String("abc"),
	}
	cases := []struct {
		before string
		want   string
		n      int
	}{
		{"x = w.ke", "ys", 2},
		{"w.", "clear get items keys pop popitem setdefault update values", 0},
		{"host_t", "en ens", 6},
		{"print(s.up", "per", 2},
		{"s.upper.x", "", 0},
		{":do", "mains", 3},
		{"  :", "begin domains end help quit reset workers", 1},
		{"_pr", "ivate", 3},
		{"1.", "", 0},
		{"nope.x", "", 0},
	}
	for _, c := range cases {
		got, n := complete(globals, c.before)
		if strings.Join(got, " ") != c.want || (c.want != "" && n != c.n) {
			t.Errorf("complete(%q) = %q, %d; want %q, %d", c.before, got, n, c.want, c.n)
		}
	}
	// Private names are offered only when asked for; universe names are.
	got, _ := complete(globals, "")
	joined := " " + strings.Join(got, " ") + " "
	if strings.Contains(joined, " _private ") || !strings.Contains(joined, " len ") || !strings.Contains(joined, " w ") {
		t.Errorf("complete(\"\") = %v", got)
	}
}
