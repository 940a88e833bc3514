package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"simpler/engine"
)

// runBinary runs this binary as `simpler args...` in dir with stdin,
// and returns its exit code, stdout and stderr.
func runBinary(t *testing.T, dir, stdin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Run()
	checkNoShm(t, env)
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// hasLines fails unless text holds want's lines one after another.
func hasLines(t *testing.T, what, text string, want ...string) {
	t.Helper()
	if !strings.Contains(text, strings.Join(want, "\n")+"\n") {
		t.Errorf("%s lacks the lines\n%s\nit is:\n%s", what, strings.Join(want, "\n"), text)
	}
}

// The source line and a caret under the offending column, with the
// SyntaxError and NameError kinds, the same under run, test and the REPL.
const syntaxScript = "def main(ctx):\n    x = [1, 2 yy]\n"
const nameScript = "def main(ctx):\n    return nope + 1\n"

func TestSyntaxErrorCaretInRunTestAndRepl(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"syn.star": syntaxScript, "name.star": nameScript})

	code, _, errs := runBinary(t, dir, "", cliEnv("NO_COLOR=1"), "run", "syn.star")
	if code != 1 {
		t.Errorf("run syn.star: exit %d, want 1", code)
	}
	hasLines(t, "run syn.star's stderr", errs,
		"        x = [1, 2 yy]",
		"                  ^",
		"SyntaxError: syn.star:2:17: got identifier, want ']'")

	code, _, errs = runBinary(t, dir, "", cliEnv("NO_COLOR=1"), "run", "name.star")
	if code != 1 {
		t.Errorf("run name.star: exit %d, want 1", code)
	}
	hasLines(t, "run name.star's stderr", errs,
		"        return nope + 1",
		"               ^",
		"NameError: name.star:2:12: undefined: nope")

	// simpler test: the golden file it writes holds what run prints.
	code, out, errs := runBinary(t, dir, "", cliEnv("NO_COLOR=1"), "test", "--update", "--run", "syn", ".")
	if code != 0 {
		t.Fatalf("test --update: exit %d\n%s%s", code, out, errs)
	}
	golden, err := os.ReadFile(filepath.Join(dir, "syn.golden"))
	if err != nil {
		t.Fatal(err)
	}
	hasLines(t, "syn.golden", string(golden),
		"        x = [1, 2 yy]",
		"                  ^",
		"SyntaxError: syn.star:2:17: got identifier, want ']'")

	// The REPL, piped.
	_, _, errs = runBinary(t, dir, "x = [1,\n  2 3]\ny = zz + 1\n", cliEnv("NO_COLOR=1"), "repl", "--devices", "0")
	hasLines(t, "the REPL's stderr", errs,
		"      2 3]",
		"        ^",
		"SyntaxError: <repl 1>:2:6: got int literal, want ']'")
	hasLines(t, "the REPL's stderr", errs,
		"    y = zz + 1",
		"        ^",
		"NameError: <repl 2>:1:5: undefined: zz")
}

// json, math and fmt are globals of a script.
func TestScriptUsesJSONMathAndFmt(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"m.star": `def main(ctx):
    print(fmt("%8.3f|%-3d|%s", math.sqrt(2), 5, "x"))
    print(json.encode({"pi": math.floor(math.pi), "l": [1, "a"]}))
    print(json.decode("[1, 2]")[1])
`})
	code, out, errs := runBinary(t, dir, "", cliEnv("NO_COLOR=1"), "run", "m.star")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	if want := "   1.414|5  |x\n{\"l\":[1,\"a\"],\"pi\":3}\n2\n"; out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
}

// simpler doc knows the collectives library, the call names doc itself
// prints, and suggests the closest entry for a typo.
func TestDocCollectivesCallNamesAndSuggestions(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"allreduce", "c.allreduce(o, inputs, outputs, workers=None, op=\"sum\", algo=\"auto\")\n"},
		{"collectives", "The auto rule: algo=\"auto\""},
		{"global_collectives", "global_collectives(w4)"},
		{"w.register", "w.register(fn, workers=None) -> CallableHandle\n"},
		{"o.submit_next_level", "o.submit_next_level(h, "},
		{"CallConfig", "timeout_s=None"},
		{"CallConfig.timeout_s", "c.timeout_s -> float or None"},
		{"fmt", "fmt(format, *values) -> string"},
		{"math", "math.sqrt(x) -> float"},
		{"json", "json.decode(s, default=unbound) -> value"},
	} {
		code, out, errs := runCLI(t, "doc", c.name)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("doc %s: exit %d, stdout lacks %q:\n%s%s", c.name, code, c.want, out, errs)
		}
	}
	code, _, errs := runCLI(t, "doc", "collectives")
	if code != 0 {
		t.Errorf("doc collectives: exit %d", code)
	}
	for _, c := range []struct{ name, want string }{
		{"allreduec", "did you mean: collectives.allreduce\n"},
		{"w.registr", "did you mean: Worker.register\n"},
		{"borad_cast", "did you mean: collectives.broadcast\n"},
	} {
		code, _, errs = runCLI(t, "doc", c.name)
		if code != 1 || !strings.Contains(errs, "no entry for") || !strings.Contains(errs, c.want) {
			t.Errorf("doc %s: exit %d, stderr lacks %q:\n%s", c.name, code, c.want, errs)
		}
	}
}

// Wrong command lines exit 2 and say what is wrong, spelling flags with
// two dashes and naming the closest flag or command.
func TestUsageErrorsExit2AndSuggest(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"ok.star": "def main(ctx):\n    pass\n"})
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", filepath.Join(dir, "missing.star")}, "missing.star: no such file"},
		{[]string{"run", dir}, "a directory, not a script"},
		{[]string{"run", "--platfrom", "a5sim", "ok.star"}, "flag provided but not defined: --platfrom (did you mean --platform?)"},
		{[]string{"run", "--devics", "0", "ok.star"}, "(did you mean --devices?)"},
		{[]string{"run", "--max-steps", "x", "ok.star"}, "invalid value \"x\" for flag --max-steps"},
		{[]string{"test", "--rnu", "x"}, "(did you mean --run?)"},
		{[]string{"run", "--devices"}, "flag needs an argument: --devices"},
		{[]string{"rnu"}, "did you mean \"run\"?"},
		{[]string{"completion", "fish"}, "unknown shell \"fish\""},
	}
	for _, c := range cases {
		code, _, errs := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("simpler %s: exit %d, want 2 and %q in:\n%s", strings.Join(c.args, " "), code, c.want, errs)
		}
	}
	code, _, errs := runCLI(t, "run", "--zzzzzz", "ok.star")
	if code != 2 || strings.Contains(errs, "did you mean") {
		t.Errorf("a flag near nothing: exit %d, suggestion in %q", code, errs)
	}
}

// simpler test --run that matches nothing says so.
func TestTestRunMatchingNothing(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.star": "def main(ctx):\n    pass\n"})
	code, out, errs := runCLI(t, "test", "--run", "zzz", dir)
	if code != 1 || !strings.Contains(errs, `--run "zzz" matches none of the 1 scripts found in `) || out != "0 passed, 0 failed\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// The completion scripts parse, and bash's completes commands and flags.
func TestCompletionScripts(t *testing.T) {
	code, script, errs := runCLI(t, "completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash: exit %d %s", code, errs)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "simpler.bash")
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "-n", file).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	complete := func(words string, cword int) string {
		t.Helper()
		probe := "source " + file + "; COMP_WORDS=(" + words + "); COMP_CWORD=" + string(rune('0'+cword)) + "; _simpler; echo \"${COMPREPLY[*]}\""
		out, err := exec.Command("bash", "-c", probe).CombinedOutput()
		if err != nil {
			t.Fatalf("bash -c %q: %v\n%s", probe, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := complete("simpler co", 1); got != "completion" {
		t.Errorf("completing 'co': %q", got)
	}
	if got := complete("simpler run --pla", 2); got != "--platform" {
		t.Errorf("completing run's --pla: %q", got)
	}
	if got := complete("simpler remote-l3-worker --token", 2); got != "--token-file" {
		t.Errorf("completing the daemon's --token: %q", got)
	}
	code, script, _ = runCLI(t, "completion", "zsh")
	if code != 0 || !strings.HasPrefix(script, "#compdef simpler\n") || !strings.Contains(script, "compdef _simpler simpler") {
		t.Errorf("completion zsh: exit %d\n%s", code, script)
	}
	if zsh, err := exec.LookPath("zsh"); err == nil { // checked where zsh is installed
		zfile := filepath.Join(dir, "_simpler")
		os.WriteFile(zfile, []byte(script), 0o600)
		if out, err := exec.Command(zsh, "-n", zfile).CombinedOutput(); err != nil {
			t.Errorf("zsh -n: %v\n%s", err, out)
		}
	}
}

// A failing script's error is red on a terminal, and plain with NO_COLOR
// or on a pipe.
func TestRunErrorColourOnATerminal(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "fails.star")
	writeFiles(t, dir, map[string]string{"fails.star": "def main(ctx):\n    fail(\"ValueError: broken\")\n"})
	for _, noColor := range []bool{false, true} {
		env := cliEnv("TERM=xterm")
		if noColor {
			env = append(env, "NO_COLOR=1")
		}
		p := startPTY(t, env, "run", "--devices", "0", script)
		p.expect("ValueError: broken")
		if code := p.wait(); code != 1 {
			t.Errorf("NO_COLOR=%v: exit %d, want 1", noColor, code)
		}
		checkNoShm(t, env)
		out := p.output()
		if red := strings.Contains(out, "\x1b[31mTraceback"); red == noColor {
			t.Errorf("NO_COLOR=%v: red %v, output:\n%q", noColor, red, out)
		}
	}
	_, _, errs := runBinary(t, dir, "", cliEnv(), "run", "--devices", "0", script)
	if strings.Contains(errs, "\x1b[") || !strings.Contains(errs, "ValueError: broken") {
		t.Errorf("colour on a pipe:\n%q", errs)
	}
}

// The REPL's history file is 0600, whether it creates it or finds one
// that is wider, and it still recalls the lines in it.
func TestReplHistoryIsPrivate(t *testing.T) {
	env, state := replEnv(t)
	file := filepath.Join(state, "simpler", "history")
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("print('from', 'history')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	p := startPTY(t, env, "repl", "--devices", "0")
	p.expect(">>> ")
	p.send("\x1b[A\r") // the up arrow recalls the file's line
	p.expect("from history")
	p.expect(">>> ")
	p.send("secret = 'tok-123'\r")
	p.expect(">>> ")
	p.send("\x04")
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d; output:\n%s", code, p.output())
	}
	checkNoShm(t, env)
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Errorf("history file mode %v, want 0600", mode)
	}
	hist, _ := os.ReadFile(file)
	if !strings.Contains(string(hist), "secret = 'tok-123'\n") {
		t.Errorf("history lacks the typed line:\n%s", hist)
	}

	// A history file the REPL creates is 0600 from the start.
	env, state = replEnv(t)
	p = startPTY(t, env, "repl", "--devices", "0")
	p.expect(">>> ")
	p.send("1 + 1\r")
	p.expect("2")
	p.expect(">>> ")
	fi, err = os.Stat(filepath.Join(state, "simpler", "history"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("a new history file: %v, err %v", fi.Mode(), err)
	}
	p.send("\x04")
	p.wait()
	checkNoShm(t, env)
}

// TestSignalNames: messages name a signal as its constant, so that
// "interrupted by" never reads "interrupted by interrupt".
func TestSignalNames(t *testing.T) {
	for sig, want := range map[syscall.Signal]string{syscall.SIGINT: "SIGINT (Ctrl-C)", syscall.SIGTERM: "SIGTERM", syscall.SIGHUP: "SIGHUP"} {
		if got := signalName(sig); got != want {
			t.Errorf("signalName(%v) = %q, want %q", sig, got, want)
		}
	}
}

// TestCancelLineCountsRunningAndWaiting steps the REPL's record of a run
// through its events: a started task is running, a submitted one that
// has not started is waiting, a finished one is neither.
func TestCancelLineCountsRunningAndWaiting(t *testing.T) {
	rw := &replWorker{index: 0}
	r := &repl{runs: map[runKey]*runRec{}}
	step := func(kind engine.EventKind, task int) {
		r.trackRun(rw, engine.Event{Kind: kind, Run: 2, Task: task})
	}
	say := func() string { return r.runs[runKey{0, 2}].unfinished().String() }
	step(engine.TaskSubmitted, 1)
	if got := say(); got != "1 task waiting" {
		t.Errorf("one submitted: %q", got)
	}
	step(engine.TaskStarted, 1)
	if got := say(); got != "1 task running" {
		t.Errorf("one started: %q", got)
	}
	step(engine.TaskSubmitted, 2)
	step(engine.TaskSubmitted, 3)
	if got := say(); got != "1 task running, 2 waiting" {
		t.Errorf("one started, two submitted: %q", got)
	}
	step(engine.TaskStarted, 2)
	if got := say(); got != "2 tasks running, 1 waiting" {
		t.Errorf("two started: %q", got)
	}
	step(engine.TaskFinished, 1)
	step(engine.TaskFinished, 2)
	step(engine.TaskFinished, 3) // finished without starting: poisoned
	if got := say(); got != "" {
		t.Errorf("all finished: %q", got)
	}
}

// A daemon that would listen beyond this host is refused without
// --token-file (exit 2, before it listens), and a loopback one logs one
// line per session: the peer and how the session ended.
func TestDaemonListenAndSessionLog(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		exe, _ := os.Executable()
		c := exec.Command(exe, "remote-l3-worker", "--listen", listen)
		c.Env = cliEnv()
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		c.Run()
		if code := c.ProcessState.ExitCode(); code != 2 || !strings.Contains(stderr.String(), "is not a loopback address; a daemon that listens beyond this host needs --token-file") || stdout.Len() != 0 {
			t.Errorf("--listen %s without --token-file: exit %d, stdout %q, stderr %q", listen, code, stdout.String(), stderr.String())
		}
	}

	runtimeEnv := "XDG_RUNTIME_DIR=" + t.TempDir()
	_, addr, log := startRemoteDaemonLog(t, runtimeEnv)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.star": `
def main(ctx):
    w = Worker(level = 4, platform = ctx.platform)
    w.add_remote_worker(endpoint = ctx.argv[0], platform = ctx.platform, device_ids = [0])
    w.init()
    w.close()
    print("closed")
`})
	code, out, errs := runBinary(t, dir, "", cliEnv(runtimeEnv), "run", "main.star", addr)
	if code != 0 || out != "closed\n" {
		t.Fatalf("the script: exit %d\n%s%s", code, out, errs)
	}
	ended := regexp.MustCompile(`simpler remote-l3-worker: session [0-9a-f]{16} from 127\.0\.0\.1:\d+ ended: exit status 0\n`)
	deadline := time.Now().Add(10 * time.Second)
	for !ended.MatchString(log.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon's log has no line for the session:\n%s", log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(ended.FindAllString(log.String(), -1)); n != 1 {
		t.Errorf("%d lines for one session:\n%s", n, log.String())
	}
}

// The daemons simpler run starts for a script (# simpler-daemons:) log
// no line for each session that ends (--quiet-sessions): the script's
// own output says how its sessions went.
func TestRunDaemonsLogWithoutSessionLines(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.star": `# simpler-daemons: 1
def main(ctx):
    w = Worker(level = 4, platform = ctx.platform)
    w.add_remote_worker(endpoint = ctx.argv[0], platform = ctx.platform, device_ids = [0])
    w.init()
    w.close()
    print("closed")
`})
	code, out, errs := runBinary(t, dir, "", cliEnv("XDG_RUNTIME_DIR="+t.TempDir()), "run", "main.star")
	if code != 0 || out != "closed\n" {
		t.Fatalf("the script: exit %d\n%s%s", code, out, errs)
	}
	if strings.Contains(errs, " ended: ") {
		t.Errorf("the script's daemon logged its session's end:\n%s", errs)
	}
}
