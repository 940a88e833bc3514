package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.starlark.net/starlark"

	"simpler/starlib"
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
	p.send("orch.dr\t") // orch is bound only while a statement runs
	p.expect("orch.drain")
	p.send("\r")
	p.expect("<built-in function drain>")
	p.expect(">>> ")
	p.send("\x04") // Ctrl-D
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d; output:\n%s", code, p.output())
	}
	checkNoShm(t, p.cmd.Env)
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
	checkNoShm(t, p.cmd.Env)
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
	p.send("\x03") // Ctrl-C
	p.expect("cancelled: the statement, in spin at <repl 1>:")
	p.expect(">>> ")
	p.send("1 + 41\r")
	p.expect("42")
	p.expect(">>> ")
	p.send("\x04")
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d; the REPL did not survive Ctrl-C; output:\n%s", code, p.output())
	}
	checkNoShm(t, p.cmd.Env)
}

// Ctrl-C reaches a statement inside a long builtin: matmul of two
// 4096x4096 arrays (about 69G multiply-adds, minutes) sees no interpreter
// step, and ends only because it polls the statement's stop signal, which
// Ctrl-C fires with the thread's cancel. The statement is cancelled within
// a second or two and the session goes on.
func TestReplCtrlCStopsABuiltin(t *testing.T) {
	env, _ := replEnv(t)
	p := startPTY(t, env, "repl", "--devices", "0")
	p.expect(">>> ")
	p.send("a = array.zeros([4096, 4096])\r")
	p.expect(">>> ")
	p.send("def mm():\r")
	p.expect("... ")
	p.send("    print(\"multiplying\")\r")
	p.send("    return array.matmul(a, a)\r")
	p.send("\r")
	p.expect(">>> ")
	p.send("mm()\r")
	p.expect("multiplying")
	at := time.Now()
	p.send("\x03") // Ctrl-C
	p.expect("cancelled: the statement")
	if took := time.Since(at); took > 3*time.Second {
		t.Errorf("the statement ended %v after Ctrl-C", took)
	}
	p.expect(">>> ")
	p.send("1 + 41\r")
	p.expect("42")
	p.expect(">>> ")
	p.send("\x04")
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d; output:\n%s", code, p.output())
	}
	checkNoShm(t, p.cmd.Env)
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
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 1 { // statements failed: a replayed session fails
		t.Fatalf("exit code %d (%v), want 1\nstderr:\n%s", code, err, stderr.String())
	}
	checkNoShm(t, cmd.Env)
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
		{"orch.submit_next", "_level _level_group", 11},
		{"orch.", strings.Join(starlib.OrchestratorMethods(), " "), 0},
		{"orc", "h", 3},
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

// A clean replayed session exits 0; one whose last statement fails
// exits 1, though the statements after a failure still run.
func TestReplPipedExitCode(t *testing.T) {
	for _, c := range []struct {
		input string
		code  int
		out   string
	}{
		{"x = 6 * 7\nx\n", 0, "42\n"},
		{"1 / 0\nprint(\"after\")\n", 1, "after\n"},
		{"print(\"before\")\n:nope\n", 1, "before\n"},
	} {
		cmd := exec.Command(os.Args[0], "repl", "--devices", "0")
		cmd.Env = cliEnv("NO_COLOR=1")
		cmd.Dir = t.TempDir()
		cmd.Stdin = strings.NewReader(c.input)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != c.code || stdout.String() != c.out {
			t.Errorf("%q: exit %d, stdout %q; want %d, %q\nstderr:\n%s", c.input, code, stdout.String(), c.code, c.out, stderr.String())
		}
		checkNoShm(t, cmd.Env)
	}
}

// :help lists every command and alias there is, and each of them runs.
func TestReplHelpListsEveryCommand(t *testing.T) {
	var input strings.Builder
	input.WriteString(":help\n")
	for _, c := range metaCommands {
		for _, name := range append([]string{c.name}, c.aliases...) {
			if c.name != ":quit" {
				input.WriteString(name + "\n")
			}
		}
	}
	input.WriteString(":q\nprint(\"not reached\")\n")
	var out, errs bytes.Buffer
	code := cmdRepl([]string{"--devices", "0"}, strings.NewReader(input.String()), &out, &errs)
	if code != 0 || errs.Len() > 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, errs.String())
	}
	help, _, _ := strings.Cut(out.String(), "Ctrl-C cancels")
	for _, c := range metaCommands {
		for _, name := range append([]string{c.name}, c.aliases...) {
			if !regexp.MustCompile(`(?m)^  .*` + regexp.QuoteMeta(name) + `[, ]`).MatchString(help) {
				t.Errorf(":help does not list %s:\n%s", name, help)
			}
		}
	}
	for _, want := range []string{"run 1 open", "run 1 ended", "no domains yet", "Worker 1 (w): level 3"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the commands did not all run: no %q in\n%s", want, out.String())
		}
	}
	if n := strings.Count(out.String(), "Tab completes"); n != 4 || strings.Contains(out.String(), "not reached") {
		t.Errorf(":help (twice), :h and :? printed the help %d times, or :q did not quit:\n%s", n, out.String())
	}
}

const slowKernel = `def slow(chip, args):
    print("kernel " + "running")
    while True:
        pass

`

// Ctrl-C while a statement waits for a long kernel cancels the statement's
// run and says so in one line; the session stays usable, and in process
// mode the chip processes live on (the terminal's Ctrl-C is not SIGINT to
// them). The kernels are typed at the prompt, which process mode ships to
// the chips.
func TestReplCtrlCCancelsTheStatementsRun(t *testing.T) {
	for _, mode := range []string{"thread", "process"} {
		t.Run(mode, func(t *testing.T) {
			env, _ := replEnv(t)
			p := startPTY(t, env, "repl", "--devices", "0,1", "--mode", mode)
			p.expect(">>> ")
			p.send(strings.ReplaceAll(slowKernel, "\n", "\r"))
			p.expect(">>> ")
			p.send("def double(chip, args):\r    args.tensor(1).write(args.tensor(0).read() * 2.0)\r\r")
			p.expect(">>> ")
			p.send("w.register(slow)\r")
			p.expect("CallableHandle(slow, ")
			p.send("w.register(double)\r")
			p.expect("CallableHandle(double, ")
			p.send("x = host_tensor(data = [1.0, 2.0])\r")
			p.expect(">>> ")
			p.send("y = host_tensor(shape = [2])\r")
			p.expect(">>> ")
			kids := childPids(p.cmd.Process.Pid)

			p.send("orch.submit_next_level(slow, TaskArgs(tensors = [(y, OUTPUT)]), worker = 0)\r")
			p.expect("kernel running")
			p.send("\x03")
			p.expect("cancelled: run 1 (1 task running)\r\n")
			p.expect(">>> ")

			// A statement's own w.run(...) is cancelled too.
			p.send("w.run(lambda o, a, c: o.submit_next_level(slow, TaskArgs(tensors = [(y, OUTPUT)]), worker = 1))\r")
			p.expect("kernel running")
			p.send("\x03")
			p.expect("cancelled: run 2 (1 task running)\r\n")
			p.expect(">>> ")

			p.send("orch.submit_next_level(double, TaskArgs(tensors = [(x, INPUT), (y, OUTPUT)]), worker = 0)\r")
			p.expect(">>> ")
			p.send("y.read().tolist()\r")
			p.expect("[2.0, 4.0]")
			p.expect(">>> ")
			for _, k := range kids {
				if syscall.Kill(k, 0) != nil {
					t.Errorf("child process %d died", k)
				}
			}
			if mode == "process" && len(kids) != 3 {
				t.Errorf("w has %d child processes, want 3 (two chips, one SUB worker)", len(kids))
			}
			p.send("\x04")
			if code := p.wait(); code != 0 {
				t.Errorf("exit code %d; output:\n%s", code, p.output())
			}
			if out := p.output(); strings.Contains(out, "Traceback") || strings.Contains(out, "signal: interrupt") {
				t.Errorf("an error besides the cancel lines:\n%s", out)
			}
			checkNoShm(t, p.cmd.Env)
		})
	}
}

// SIGINT reaches a statement of a replayed session too: the REPL
// cancels it, goes on with the next statements, and exits 1.
func TestReplSIGINTCancelsAPipedStatement(t *testing.T) {
	cmd := exec.Command(os.Args[0], "repl", "--devices", "0")
	cmd.Env = cliEnv("NO_COLOR=1")
	cmd.Dir = t.TempDir()
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	io.WriteString(stdin, slowKernel+"w.register(slow)\nx = host_tensor(shape = [1])\n"+
		"orch.submit_next_level(slow, TaskArgs(tensors = [(x, OUTPUT)]), worker = 0)\n")
	out := bufio.NewReader(stdout)
	readUntil(t, out, "kernel running")
	cmd.Process.Signal(syscall.SIGINT)
	io.WriteString(stdin, "print(\"next\")\n")
	stdin.Close()
	readUntil(t, out, "next")
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(stderr.String(), "cancelled: run 1 (1 task running)\n") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
	}
	checkNoShm(t, cmd.Env)
}

// readUntil reads lines from r until one contains want.
func readUntil(t *testing.T, r *bufio.Reader, want string) {
	t.Helper()
	var seen strings.Builder
	for {
		line, err := r.ReadString('\n')
		seen.WriteString(line)
		if strings.Contains(line, want) {
			return
		}
		if err != nil {
			t.Fatalf("the output ended without %q:\n%s", want, seen.String())
		}
	}
}

// In process mode, w (made before the first prompt) runs a kernel loaded
// from a file afterwards, one from the embedded library (which a child
// used to report "changed on disk"), and one typed at the prompt, whose
// statement is shipped to the chips; one that reads another statement's
// global is refused with that reason.
func TestReplProcessModeRegisters(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"kernels.star": "def add(chip, args):\n    args.tensor(2).write(args.tensor(0).read() + args.tensor(1).read())\n"})
	input := `load("kernels.star", "add")
w.register(add)
a = host_tensor(data = [1.0, 2.0])
out = host_tensor(shape = [2])
orch.submit_next_level(add, TaskArgs(tensors = [(a, INPUT), (a, INPUT), (out, OUTPUT)]), worker = 0)
out.read().tolist()
def triple(chip, args):
    args.tensor(1).write(args.tensor(0).read() * 3.0)

w.register(triple)
orch.submit_next_level(triple, TaskArgs(tensors = [(a, INPUT), (out, OUTPUT)]), worker = 1)
out.read().tolist()
load("@simpler//collective_kernels.star", "stage_window")
w.register(stage_window)
K = 5.0
def scale(chip, args):
    args.tensor(1).write(args.tensor(0).read() * K)

w.register(scale)
`
	cmd := exec.Command(os.Args[0], "repl", "--mode", "process")
	cmd.Env = cliEnv("NO_COLOR=1")
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(input)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Run()
	checkNoShm(t, cmd.Env)
	got := regexp.MustCompile(`sha256:[0-9a-f]{12}`).ReplaceAllString(stdout.String(), "sha256:X")
	want := "CallableHandle(add, sha256:X...)\n[2.0, 4.0]\nCallableHandle(triple, sha256:X...)\n[3.0, 6.0]\nCallableHandle(stage_window, sha256:X...)\n"
	if got != want {
		t.Errorf("stdout:\n%s\nwant:\n%s\nstderr:\n%s", got, want, stderr.String())
	}
	refusal := "register: scale was typed at the prompt (<repl 14>) and reads K, bound by another statement there"
	if errs := stderr.String(); strings.Count(errs, "Traceback") != 1 || !strings.Contains(errs, refusal) {
		t.Errorf("stderr:\n%s\nwant only the refusal %q", errs, refusal)
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit code %d, want 1 (a registration was refused)", code)
	}
}

// simpler repl --race: a race's report comes as the statement that made it
// runs, before the next statement's output; :reset and the exit print the
// summary of the session they end; a session that found a race exits 66,
// one that found none prints nothing of the detector and exits 0.
func TestReplRace(t *testing.T) {
	racy := `def put(chip, args):
    args.tensor(0).fill(args.scalar(0))

w.register(put)
t = host_tensor(shape = [4], dtype = INT32)
def two_writers(o, args, cfg):
    o.submit_next_level(put, TaskArgs(tensors = [(t, OUTPUT_EXISTING)], scalars = [1]), worker = 0)
    o.submit_next_level(put, TaskArgs(tensors = [(t, OUTPUT_EXISTING)], scalars = [2]), worker = 0)

w.run(two_writers)
print("next statement")
:reset
print("after reset")
`
	for _, c := range []struct {
		name, input string
		code        int
		want        []string // in this order, in stdout and stderr together
	}{
		{"racy", racy, exitRace, []string{
			"WARNING: DATA RACE\nWrite of bytes [0, 16) of host tensor",
			"  put()\n      <repl 1>:2:24\n\nPrevious write of bytes [0, 16)",
			"Unordered: no task dependency: an OUTPUT or OUTPUT_EXISTING (insert-only) does not wait for an earlier writer",
			"==================\nnext statement\nsimpler: found 1 data race(s)\nafter reset\n",
		}},
		{"race-free", "x = 6 * 7\nx\n", 0, []string{"42\n"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "repl", "--race", "--devices", "0-1")
			cmd.Env = cliEnv("NO_COLOR=1")
			cmd.Dir = t.TempDir()
			cmd.Stdin = strings.NewReader(c.input)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			cmd.Run()
			checkNoShm(t, cmd.Env)
			got := out.String()
			if code := cmd.ProcessState.ExitCode(); code != c.code {
				t.Errorf("exit %d, want %d\n%s", code, c.code, got)
			}
			at := 0
			for _, w := range c.want {
				i := strings.Index(got[at:], w)
				if i < 0 {
					t.Fatalf("the output lacks %q after offset %d:\n%s", w, at, got)
				}
				at += i + len(w)
			}
			if rest := got[at:]; rest != "" {
				t.Errorf("more output after the last expected part (a second summary?): %q", rest)
			}
			if n := strings.Count(got, "WARNING: DATA RACE"); c.code == exitRace && n != 1 {
				t.Errorf("%d race reports, want 1:\n%s", n, got)
			}
		})
	}
}
