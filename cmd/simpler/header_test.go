package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A script's # simpler-args: line may not widen its own sandbox: a header
// that sets --load-path, --trace or --max-steps is refused before
// anything is read or written (the file outside the tree is not loaded,
// so its content is not printed; the trace target keeps its bytes), with
// a message naming the flag and saying to pass it on the command line. A
// header of the allowed flags still runs right after, and so does the
// same script with the flag given on the command line.
func TestRunHeaderNeverWidensTheSandbox(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "outside", "secret.star")
	victim := filepath.Join(dir, "outside", "victim.txt")
	writeFiles(t, dir, map[string]string{
		"outside/secret.star": "hunter2\n",
		"outside/victim.txt":  "keep me\n",
		"proj/load.star":      "# simpler-args: --load-path /\nload(\"" + secret + "\", \"x\")\n\ndef main(ctx):\n    print(x)\n",
		"proj/trace.star":     "# simpler-args: --devices 0 --trace " + victim + "\ndef main(ctx):\n    print(\"ran\")\n",
		"proj/steps.star":     "# simpler-args: --max-steps=100000000\ndef main(ctx):\n    print(\"ran\")\n",
		"proj/fine.star":      "# simpler-args: --devices 0-2 --mode thread --platform a2a3sim\ndef main(ctx):\n    print(ctx.device_ids)\n",
	})
	proj := filepath.Join(dir, "proj")
	for _, c := range []struct{ script, flag string }{
		{"load.star", "load-path"},
		{"trace.star", "trace"},
		{"steps.star", "max-steps"},
	} {
		code, out, errs := runCLI(t, "run", filepath.Join(proj, c.script))
		want := "its # simpler-args: line: ValueError: --" + c.flag + " is for the command line only"
		if code != 2 || out != "" || !strings.Contains(errs, want) || !strings.Contains(errs, "pass --"+c.flag+" before the script's name") {
			t.Errorf("%s: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 2 and %q", c.script, code, out, errs, want)
		}
		if strings.Contains(errs, "hunter2") {
			t.Errorf("%s: the refusal prints the file outside the tree: %s", c.script, errs)
		}
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me\n" {
		t.Errorf("the header's --trace target: %q, %v; want it untouched", b, err)
	}
	// The allowed flags still set the script's defaults.
	if code, out, errs := runCLI(t, "run", filepath.Join(proj, "fine.star")); code != 0 || out != "[0, 1, 2]\n" {
		t.Errorf("fine.star: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	// On the command line the same flag is the user's choice, and works.
	trace := filepath.Join(dir, "t.json")
	writeFiles(t, dir, map[string]string{"proj/plain.star": "def main(ctx):\n    print(\"ran\")\n"})
	if code, out, errs := runCLI(t, "run", "--trace", trace, "--max-steps", "100000", filepath.Join(proj, "plain.star")); code != 0 || out != "ran\n" {
		t.Errorf("flags on the command line: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if _, err := os.Stat(trace); err != nil {
		t.Errorf("--trace on the command line wrote nothing: %v", err)
	}
}

// simpler test does not splice a refused header into the command line
// (where the flag would be allowed): the script's run refuses it as
// `simpler run` does, and the trace target keeps its bytes.
func TestSimplerTestRefusesWideningHeaders(t *testing.T) {
	t.Setenv(asCLI, "1") // children started through os.Executable() are this binary
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim.txt")
	writeFiles(t, dir, map[string]string{
		"victim.txt":       "keep me\n",
		"tests/trace.star": "# simpler-args: --trace " + victim + "\ndef main(ctx):\n    print(\"ran\")\n",
		"tests/fine.star":  "# simpler-args: --devices 0-2\ndef main(ctx):\n    print(ctx.device_ids)\n",
	})
	tests := filepath.Join(dir, "tests")
	code, out, errs := runCLI(t, "test", "-update", tests)
	if code != 0 {
		t.Fatalf("-update: exit %d\n%s\n%s", code, out, errs)
	}
	got, err := os.ReadFile(filepath.Join(tests, "trace.golden"))
	if err != nil || !strings.HasPrefix(string(got), "-- exit --\n2\n-- stdout --\n-- stderr --\n") || !strings.Contains(string(got), "--trace is for the command line only") {
		t.Errorf("trace.golden: %v\n%s", err, got)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me\n" {
		t.Errorf("the header's --trace target: %q, %v; want it untouched", b, err)
	}
	if got, err := os.ReadFile(filepath.Join(tests, "fine.golden")); err != nil || !strings.Contains(string(got), "-- stdout --\n[0, 1, 2]\n") {
		t.Errorf("fine.golden: %v\n%s", err, got)
	}
}
