package golden

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"simpler/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestDiffShowsChangedLinesWithContext(t *testing.T) {
	want := "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n"
	got := "a\nb\nc\nd\nE\nf\ng\nh\ni\nj\nk\n"
	d := Diff("want.golden", "got", want, got)
	wantDiff := `--- want.golden
+++ got
@@ -2,9 +2,10 @@
 b
 c
 d
-e
+E
 f
 g
 h
 i
 j
+k
`
	if d != wantDiff {
		t.Errorf("diff:\n%s\nwant:\n%s", d, wantDiff)
	}
	if Diff("x", "y", want, want) != "" {
		t.Error("equal inputs gave a diff")
	}
}

func TestDiffSeparateHunksAndMissingNewline(t *testing.T) {
	var a, b []string
	for i := 0; i < 30; i++ {
		a = append(a, strings.Repeat("x", i%7+1))
		b = append(b, strings.Repeat("x", i%7+1))
	}
	b[2], b[25] = "changed early", "changed late"
	d := Diff("w", "g", strings.Join(a, "\n")+"\n", strings.Join(b, "\n"))
	if n := strings.Count(d, "@@ -"); n != 2 {
		t.Errorf("want 2 hunks, got %d:\n%s", n, d)
	}
	for _, s := range []string{"+changed early\n", "+changed late\n", "-xxxxx\n", "\\ No newline at end of file\n"} {
		if !strings.Contains(d, s) {
			t.Errorf("diff lacks %q:\n%s", s, d)
		}
	}
}

func TestNormalizeAndFormat(t *testing.T) {
	r := Result{Exit: 1, Stdout: Normalize("at 0x7f00aa12bc00 and 0x10\n"), Stderr: ""}
	want := "-- exit --\n1\n-- stdout --\nat 0xADDR and 0x10\n-- stderr --\n"
	if r.Format() != want {
		t.Errorf("got %q want %q", r.Format(), want)
	}
	if got := ScriptArgs([]byte("x = 1\n# simpler-args: --devices 0-7  --platform a5sim\n")); strings.Join(got, " ") != "--devices 0-7 --platform a5sim" {
		t.Errorf("ScriptArgs: %q", got)
	}
}

func TestFindSkipsLibraryModules(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a.star":          "def main(ctx):\n    pass\n",
		"b.star":          "x = 1\n",
		"b.golden":        "",
		"lib/helper.star": "def helper():\n    pass\n",
		"sub/c.star":      "def main(ctx):\n    pass\n",
		"notes.txt":       "",
	}
	for name, src := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Find([]string{dir, filepath.Join(dir, "lib/helper.star")})
	if err != nil {
		t.Fatal(err)
	}
	var rel []string
	for _, p := range got {
		r, _ := filepath.Rel(dir, p)
		rel = append(rel, r)
	}
	if strings.Join(rel, " ") != "a.star b.star lib/helper.star sub/c.star" {
		t.Errorf("Find: %v", rel)
	}
	if _, err := Find([]string{filepath.Join(dir, "missing")}); err == nil {
		t.Error("Find of a missing path succeeded")
	}
}

// TestRunnerCheck drives a stand-in binary (a shell script) through
// Check: a pass, a diff, a missing golden file, -update and a timeout.
func TestRunnerCheck(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal("no sh:", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-simpler")
	// Prints its arguments; "slow.star" never finishes on its own.
	script := "#!" + sh + "\ncase \"$*\" in *slow.star) exec sleep 600;; esac\necho \"args: $*\"\necho oops 0x1234567 >&2\nexit 3\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ok.star", "bad.star", "new.star", "slow.star"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("# simpler-args: --mode thread\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	okGolden := "-- exit --\n3\n-- stdout --\nargs: run --platform a2a3sim --devices 0,1 --mode thread ok.star\n-- stderr --\noops 0xADDR\n"
	if err := os.WriteFile(filepath.Join(dir, "ok.golden"), []byte(okGolden), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.golden"), []byte("-- exit --\n0\n-- stdout --\n-- stderr --\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &Runner{Binary: bin, Timeout: 2 * time.Second}

	if o := r.Check(filepath.Join(dir, "ok.star"), false); !o.Passed {
		t.Errorf("ok.star: %+v", o)
	}
	o := r.Check(filepath.Join(dir, "bad.star"), false)
	if o.Passed || !strings.Contains(o.Diff, "-0\n+3\n") || !strings.Contains(o.Diff, "+oops 0xADDR") {
		t.Errorf("bad.star: %+v", o)
	}
	o = r.Check(filepath.Join(dir, "new.star"), false)
	if o.Passed || !strings.Contains(o.Problem, "no golden file") || !strings.HasPrefix(o.Got, "-- exit --\n") {
		t.Errorf("new.star: %+v (Got should hold what it printed)", o)
	}
	o = r.Check(filepath.Join(dir, "new.star"), true)
	if !o.Passed || !o.Updated {
		t.Errorf("new.star -update: %+v", o)
	}
	if o := r.Check(filepath.Join(dir, "new.star"), false); !o.Passed {
		t.Errorf("new.star after -update: %+v", o)
	}
	o = r.Check(filepath.Join(dir, "slow.star"), false)
	if o.Passed || !strings.Contains(o.Problem, "killed") {
		t.Errorf("slow.star: %+v", o)
	}
}

// TestRunnerInterrupt cancels the runner's context while a script runs:
// the script and the process it started are killed, and the outcome says
// it was interrupted.
func TestRunnerInterrupt(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal("no sh:", err)
	}
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	bin := filepath.Join(dir, "fake-simpler")
	script := "#!" + sh + "\nsleep 600 &\necho $! > " + started + ".tmp\nmv " + started + ".tmp " + started + "\nwait\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hang.star"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &Runner{Binary: bin, Context: ctx}
	done := make(chan Outcome, 1)
	go func() { done <- r.Check(filepath.Join(dir, "hang.star"), false) }()
	deadline := time.Now().Add(30 * time.Second)
	var pidText []byte
	for {
		if pidText, err = os.ReadFile(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the script never started")
		}
		time.Sleep(5 * time.Millisecond) // polling for the file, with a deadline
	}
	cancel()
	o := <-done
	if o.Passed || !strings.Contains(o.Problem, "interrupted") {
		t.Errorf("outcome %+v", o)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		t.Fatal(err)
	}
	for alive(pid) { // the grandchild dies with its group
		if time.Now().After(deadline) {
			t.Fatalf("process %d the script started is still running", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// alive reports whether pid is running (a zombie is not).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// A header is passed on to a script's command line only when it sets
// nothing but HeaderFlags, however the flag is spelled.
func TestHeaderAllowed(t *testing.T) {
	for args, want := range map[string]bool{
		"--devices 0-3 --mode process -platform=a5sim": true,
		"":                        true,
		"--load-path /":           false,
		"-load-path=/":            false,
		"--devices 0 --trace x":   false,
		"--max-steps=100":         false,
		"--devices 0 -trace=/tmp": false,
	} {
		if got := headerAllowed(strings.Fields(args)); got != want {
			t.Errorf("headerAllowed(%q) = %v, want %v", args, got, want)
		}
	}
}
