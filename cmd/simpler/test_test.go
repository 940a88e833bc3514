package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"simpler/starlib"
)

// testFiles are a user's tests: one passing (it loads a helper module,
// which is not a test), one whose golden file is out of date.
var testFiles = map[string]string{
	"pass.star": `load("lib/helper.star", "greet")

def main(ctx):
    print(greet(ctx.platform, len(ctx.device_ids)))
`,
	"pass.golden": "-- exit --\n0\n-- stdout --\nhello a2a3sim with 2 chips\n-- stderr --\n",
	"lib/helper.star": `def greet(p, n):
    return "hello %s with %d chips" % (p, n)
`,
	"sub/fail.star": `def main(ctx):
    print("one")
    print("two and a half")
    print("three")
`,
	"sub/fail.golden": "-- exit --\n0\n-- stdout --\none\ntwo\nthree\n-- stderr --\n",
}

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestSimplerTest(t *testing.T) {
	t.Setenv(asCLI, "1") // children started through os.Executable() are this binary
	dir := t.TempDir()
	writeFiles(t, dir, testFiles)

	code, out, errs := runCLI(t, "test", dir)
	if code != 1 {
		t.Errorf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if last := lines[len(lines)-1]; last != "1 passed, 1 failed" {
		t.Errorf("last line %q\n%s", last, out)
	}
	failPath := filepath.Join(dir, "sub", "fail.star")
	for _, want := range []string{
		"FAIL " + failPath,
		"--- " + filepath.Join(dir, "sub", "fail.golden"),
		"+++ got",
		"    -two\n",
		"    +two and a half\n",
		"     one\n", // context
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "helper") || strings.Contains(out, "\x1b[") {
		t.Errorf("a library module was run, or colour on a pipe:\n%s", out)
	}

	// -run selects by path; -v lists passes.
	code, out, _ = runCLI(t, "test", "-v", "-run", "pass", dir)
	if code != 0 || !strings.HasSuffix(out, "1 passed, 0 failed\n") || !strings.Contains(out, "PASS "+filepath.Join(dir, "pass.star")) {
		t.Errorf("-run pass: exit %d\n%s", code, out)
	}

	// -update rewrites the golden file; then everything passes.
	code, out, _ = runCLI(t, "test", dir, "-update")
	if code != 0 || !strings.Contains(out, "UPDATED "+failPath) || !strings.HasSuffix(out, "2 passed, 0 failed\n") {
		t.Errorf("-update: exit %d\n%s", code, out)
	}
	golden, err := os.ReadFile(filepath.Join(dir, "sub", "fail.golden"))
	if err != nil || !strings.Contains(string(golden), "two and a half") {
		t.Errorf("fail.golden after -update: %q, %v", golden, err)
	}
	code, out, _ = runCLI(t, "test", dir)
	if code != 0 || !strings.HasSuffix(out, "2 passed, 0 failed\n") {
		t.Errorf("after -update: exit %d\n%s", code, out)
	}
}

func TestSimplerTestCrashAndMissingGolden(t *testing.T) {
	t.Setenv(asCLI, "1")
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"boom.star":   "def main(ctx):\n    fail(\"boom\")\n",
		"boom.golden": "-- exit --\n1\n-- stdout --\n-- stderr --\nTraceback (most recent call last):\n  boom.star:2:9: in main\n        fail(\"boom\")\n            ^\nRuntimeError: boom\n",
		"new.star":    "def main(ctx):\n    pass\n",
	})
	code, out, _ := runCLI(t, "test", dir)
	if code != 1 || !strings.Contains(out, "no golden file") || !strings.HasSuffix(out, "1 passed, 1 failed\n") {
		t.Errorf("exit %d\n%s", code, out)
	}
	code, out, errs := runCLI(t, "test", filepath.Join(dir, "nothing-here"))
	if code != 2 || !strings.Contains(errs, "nothing-here") {
		t.Errorf("missing path: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, _ = runCLI(t, "test", "-run", "zzz", dir)
	if code != 1 || out != "0 passed, 0 failed\n" {
		t.Errorf("no match: exit %d %q", code, out)
	}
}

// TestSimplerTestModes: --mode thread,process runs every script in both
// modes against one golden file, so a script whose output depends on the
// mode fails in the second; a bad --mode is a usage error.
func TestSimplerTestModes(t *testing.T) {
	t.Setenv(asCLI, "1")
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"same.star":   "def main(ctx):\n    print(\"hello\")\n",
		"same.golden": "-- exit --\n0\n-- stdout --\nhello\n-- stderr --\n",
		"mode.star":   "def main(ctx):\n    print(ctx.mode)\n",
		"mode.golden": "-- exit --\n0\n-- stdout --\nthread\n-- stderr --\n",
	})
	code, out, errs := runCLI(t, "test", "-v", "--mode", "thread,process", dir)
	modeStar := filepath.Join(dir, "mode.star")
	for _, want := range []string{
		"PASS " + modeStar + " [thread]",
		"PASS " + filepath.Join(dir, "same.star") + " [process]",
		"FAIL " + modeStar + " [process]",
		"    -thread\n    +process\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code != 1 || !strings.HasSuffix(out, "3 passed, 1 failed\n") {
		t.Errorf("exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = runCLI(t, "test", "--mode", "threads", dir)
	if code != 2 || out != "" || !strings.Contains(errs, "--mode must be thread, process or both") {
		t.Errorf("--mode threads: exit %d %q %q", code, out, errs)
	}
}

func TestDoc(t *testing.T) {
	code, out, _ := runCLI(t, "doc")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, d := range starlib.Docs() {
		if !strings.Contains(out, d.Signature+"\n    "+d.Summary+"\n") {
			t.Errorf("simpler doc lacks %s", d.Name)
		}
	}
	code, out, _ = runCLI(t, "doc", "Worker.register")
	if code != 0 || !strings.HasPrefix(out, "w.register(fn, workers=None)") || strings.Count(out, "\n") != 2 {
		t.Errorf("doc Worker.register: %d %q", code, out)
	}
	code, out, _ = runCLI(t, "doc", "Comm")
	if code != 0 || !strings.Contains(out, "comm.barrier(") || !strings.Contains(out, "comm.peer(") {
		t.Errorf("doc Comm: %d %q", code, out)
	}
	code, _, errs := runCLI(t, "doc", "alocate")
	if code != 1 || !strings.Contains(errs, `no entry for "alocate"`) {
		t.Errorf("doc alocate: %d %q", code, errs)
	}
	code, _, errs = runCLI(t, "doc", "domain")
	if code != 1 || !strings.Contains(errs, "Orchestrator.allocate_domain") {
		t.Errorf("doc domain suggestions: %d %q", code, errs)
	}
}
