package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// loadPathFiles are a script in proj/ that loads from two sibling
// directories, which only --load-path opens to it.
var loadPathFiles = map[string]string{
	"proj/main.star": `load("../shared/util.star", "X")
load("../vendor/v.star", "Y")

def main(ctx):
    print(X, Y)
`,
	"shared/util.star": "X = \"shared\"\n",
	"vendor/v.star":    "Y = \"vendor\"\n",
}

func TestRunLoadPath(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, loadPathFiles)
	main := filepath.Join(dir, "proj", "main.star")
	shared, vendor := filepath.Join(dir, "shared"), filepath.Join(dir, "vendor")

	code, out, errs := runCLI(t, "run", main)
	if code != 1 || !strings.Contains(errs, `ValueError: cannot load "../shared/util.star"`) || !strings.Contains(errs, "outside the load roots") {
		t.Errorf("no --load-path: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	code, out, errs = runCLI(t, "run", "--load-path", shared, main)
	if code != 1 || !strings.Contains(errs, `ValueError: cannot load "../vendor/v.star"`) {
		t.Errorf("one --load-path: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	code, out, errs = runCLI(t, "run", "--load-path", shared, "--load-path", vendor, main)
	if code != 0 || out != "shared vendor\n" {
		t.Errorf("both: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	code, _, errs = runCLI(t, "run", "--load-path", filepath.Join(dir, "none"), main)
	if code != 2 || !strings.Contains(errs, "ValueError: --load-path "+filepath.Join(dir, "none")+": not a directory") {
		t.Errorf("a missing --load-path: exit %d\nstderr:\n%s", code, errs)
	}
	// Even below a load root, a device is refused before it is read
	// (reading /dev/zero would never end).
	writeFiles(t, dir, map[string]string{"dev.star": "load(\"/dev/zero\", \"x\")\n\ndef main(ctx):\n    print(x)\n"})
	code, out, errs = runCLI(t, "run", "--load-path", "/dev", filepath.Join(dir, "dev.star"))
	if code != 1 || out != "" || !strings.HasSuffix(errs, "ValueError: cannot load \"/dev/zero\": not a regular file (a character device)\n") {
		t.Errorf("/dev/zero below --load-path /dev: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}

const spinScript = `def main(ctx):
    print("start")
    n = 0
    while True:
        n += 1
`

func TestRunMaxSteps(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"spin.star":   spinScript,
		"finite.star": "def main(ctx):\n    n = 0\n    for i in range(100000):\n        n += i\n    print(n)\n",
	})
	code, out, errs := runCLI(t, "run", "--max-steps", "5000", filepath.Join(dir, "spin.star"))
	if code != 1 || out != "start\n" || !strings.HasSuffix(errs, "\nRuntimeError: too many steps (--max-steps 5000)\n") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	// The default is no bound (beyond a module top level's own).
	code, out, errs = runCLI(t, "run", filepath.Join(dir, "finite.star"))
	if code != 0 || out != "4999950000\n" {
		t.Errorf("no --max-steps: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	code, _, errs = runCLI(t, "run", "--max-steps", "1000", filepath.Join(dir, "finite.star"))
	if code != 1 || !strings.Contains(errs, "RuntimeError: too many steps (--max-steps 1000)") {
		t.Errorf("a bound below what the script needs: exit %d\nstderr:\n%s", code, errs)
	}
	if code, _, _ = runCLI(t, "run", "--max-steps", "-1", filepath.Join(dir, "finite.star")); code != 2 {
		t.Errorf("--max-steps -1: exit %d, want 2", code)
	}
	// It bounds a module's top level too, when it is the lower bound.
	writeFiles(t, dir, map[string]string{
		"loads_loop.star": "load(\"loop.star\", \"N\")\n\ndef main(ctx):\n    print(N)\n",
		"loop.star":       "n = [0]\nwhile True:\n    n[0] += 1\nN = n[0]\n",
	})
	code, out, errs = runCLI(t, "run", "--max-steps", "10000", filepath.Join(dir, "loads_loop.star"))
	if code != 1 || out != "" || !strings.HasSuffix(errs, "RuntimeError: cannot load loop.star: too many steps loading "+filepath.Join(dir, "loop.star")+" (--max-steps 10000)\n") {
		t.Errorf("a module's top level: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}

// simpler test passes both flags to every script, a relative --load-path
// made absolute (each script runs in its own directory).
func TestSimplerTestPassesLoadPathAndMaxSteps(t *testing.T) {
	t.Setenv(asCLI, "1") // children started through os.Executable() are this binary
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"tests/uses_shared.star":   "load(\"../shared/util.star\", \"X\")\n\ndef main(ctx):\n    print(X)\n",
		"tests/uses_shared.golden": "-- exit --\n0\n-- stdout --\nshared\n-- stderr --\n",
		"tests/spin.star":          spinScript,
		"shared/util.star":         "X = \"shared\"\n",
	})
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	shared, err := filepath.Rel(wd, filepath.Join(dir, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	tests := filepath.Join(dir, "tests")

	code, out, _ := runCLI(t, "test", "-run", "uses_shared", tests)
	if code != 1 || !strings.HasSuffix(out, "0 passed, 1 failed\n") || !strings.Contains(out, "outside the load roots") {
		t.Errorf("without --load-path: exit %d\n%s", code, out)
	}
	// -update writes spin.golden from a run under --max-steps: it ended.
	code, out, errs := runCLI(t, "test", "--load-path", shared, "--max-steps", "5000", "-update", "-run", "spin", tests)
	if code != 0 {
		t.Fatalf("-update: exit %d\n%s\n%s", code, out, errs)
	}
	golden, err := os.ReadFile(filepath.Join(tests, "spin.golden"))
	if err != nil || !strings.Contains(string(golden), "-- exit --\n1\n") || !strings.Contains(string(golden), "RuntimeError: too many steps (--max-steps 5000)") {
		t.Fatalf("spin.golden: %v\n%s", err, golden)
	}
	code, out, errs = runCLI(t, "test", tests, "--load-path", shared, "--max-steps", "5000")
	if code != 0 || !strings.HasSuffix(out, "2 passed, 0 failed\n") {
		t.Errorf("with both flags: exit %d\n%s\n%s", code, out, errs)
	}
	code, _, errs = runCLI(t, "test", "--load-path", filepath.Join(dir, "none"), tests)
	if code != 2 || !strings.Contains(errs, "--load-path "+filepath.Join(dir, "none")+": not a directory") {
		t.Errorf("a missing --load-path: exit %d\n%s", code, errs)
	}
}

// In the REPL the working directory is the root; --load-path adds more.
func TestReplLoadPath(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"shared/util.star": "X = \"from shared\"\n"})
	input := "load(\"" + filepath.Join(dir, "shared", "util.star") + "\", \"X\")\nprint(X)\n"
	repl := func(flags ...string) (int, string, string) {
		var out, errs bytes.Buffer
		code := cmdRepl(append([]string{"--devices", "0"}, flags...), strings.NewReader(input), &out, &errs)
		return code, out.String(), errs.String()
	}
	_, out, errs := repl()
	if strings.Contains(out, "from shared") || !strings.Contains(errs, "outside the load roots") {
		t.Errorf("no --load-path:\nstdout:\n%s\nstderr:\n%s", out, errs)
	}
	code, out, errs := repl("--load-path", filepath.Join(dir, "shared"))
	if code != 0 || !strings.Contains(out, "from shared") {
		t.Errorf("with --load-path: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if code, _, errs = repl("--load-path", filepath.Join(dir, "none")); code != 2 || !strings.Contains(errs, "not a directory") {
		t.Errorf("a missing --load-path: exit %d\n%s", code, errs)
	}
}
