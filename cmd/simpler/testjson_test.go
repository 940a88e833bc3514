package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// reportFiles are three scripts: one that passes, one whose golden file
// is out of date, one with no golden file yet.
var reportFiles = map[string]string{
	"a_pass.star":   "def main(ctx):\n    print(\"fine\")\n",
	"a_pass.golden": "-- exit --\n0\n-- stdout --\nfine\n-- stderr --\n",
	"b_fail.star":   "def main(ctx):\n    print(\"two and a half\")\n",
	"b_fail.golden": "-- exit --\n0\n-- stdout --\ntwo\n-- stderr --\n",
	"c_new.star":    "def main(ctx):\n    print(\"brand new\", ctx.mode)\n",
}

// jsonEvents parses `simpler test -json` output: every line must be one
// JSON object with a Time and an Action.
func jsonEvents(t *testing.T, out string) []testEvent {
	t.Helper()
	var events []testEvent
	for i, line := range splitOutput(out) {
		var fields map[string]any
		if err := json.Unmarshal([]byte(line), &fields); err != nil {
			t.Fatalf("line %d is not a JSON object: %v\n%s", i+1, err, line)
		}
		var e testEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if e.Time.IsZero() || e.Action == "" {
			t.Errorf("line %d lacks Time or Action: %s", i+1, line)
		}
		events = append(events, e)
	}
	if len(events) == 0 {
		t.Fatal("no events")
	}
	return events
}

// verdicts counts the pass, fail and skip events of scripts, and checks
// that each comes after the script's run event.
func verdicts(t *testing.T, events []testEvent) map[string]int {
	t.Helper()
	counts := map[string]int{}
	running := map[string]bool{}
	for _, e := range events {
		key := e.Script + " " + e.Mode
		switch {
		case e.Script == "":
		case e.Action == "run":
			running[key] = true
		case e.Action == "output":
			if !running[key] {
				t.Errorf("output of %s before its run event", key)
			}
		default:
			if !running[key] || e.Elapsed == nil {
				t.Errorf("%s of %s without a run event or Elapsed", e.Action, key)
			}
			delete(running, key)
			counts[e.Action]++
		}
	}
	return counts
}

// junitCounts reads an XML report with Python's xml.etree and returns its
// testcase, failure and skipped element counts, as a CI system would.
func junitCounts(t *testing.T, path string) string {
	t.Helper()
	py := `import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
cases = root.findall(".//testcase")
print(root.tag, len(cases), len(root.findall(".//testcase/failure")), len(root.findall(".//testcase/skipped")), root.get("tests"), root.get("failures"))`
	out, err := exec.Command("python3", "-c", py, path).CombinedOutput()
	if err != nil {
		t.Fatalf("python3 cannot read the JUnit file: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestSimplerTestJSON: -json prints only JSON events, whose verdicts match
// the run (in thread and process mode), and --junit writes a report that
// Python's xml.etree reads with the same counts.
func TestSimplerTestJSON(t *testing.T) {
	t.Setenv(asCLI, "1")
	dir := t.TempDir()
	writeFiles(t, dir, reportFiles)
	report := filepath.Join(t.TempDir(), "report.xml")

	code, out, errs := runCLI(t, "test", "-json", "--junit", report, "--mode", "thread,process", dir)
	if code != 1 {
		t.Errorf("exit %d, want 1\n%s\n%s", code, out, errs)
	}
	events := jsonEvents(t, out)
	counts := verdicts(t, events)
	if counts["pass"] != 2 || counts["fail"] != 4 || counts["skip"] != 0 {
		t.Errorf("verdicts %v, want 2 pass and 4 fail\n%s", counts, out)
	}
	last := events[len(events)-1]
	if last.Script != "" || last.Action != "fail" || last.Passed == nil || *last.Passed != 2 || *last.Failed != 4 || *last.Skipped != 0 {
		t.Errorf("last event %+v", last)
	}
	if s := events[len(events)-2]; s.Action != "output" || s.Output != "2 passed, 4 failed\n" {
		t.Errorf("summary event %+v", s)
	}
	var all strings.Builder
	for _, e := range events {
		all.WriteString(e.Output)
	}
	for _, want := range []string{"PASS " + filepath.Join(dir, "a_pass.star") + " [process]", "    +two and a half\n", "    | brand new process\n"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("the output events lack %q:\n%s", want, all.String())
		}
	}
	if got := junitCounts(t, report); got != "testsuites 6 4 0 6 4" {
		t.Errorf("JUnit report: tag, cases, failures, skipped, tests=, failures= are %q, want \"testsuites 6 4 0 6 4\"", got)
	}

	// A passing run: exit 0, its last event a pass.
	code, out, _ = runCLI(t, "test", "-json", "-run", "a_pass", dir)
	events = jsonEvents(t, out)
	if last := events[len(events)-1]; code != 0 || last.Action != "pass" || *last.Passed != 1 {
		t.Errorf("passing run: exit %d, last event %+v", code, last)
	}

	// A script whose header starts a remote-l3-worker daemon: its run,
	// daemon and all, is one passing event and one JUnit testcase.
	remote, err := filepath.Abs(filepath.Join("..", "..", "scripts", "examples", "vector_add_mixed_l3.star"))
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs = runCLI(t, "test", "-json", "--junit", report, remote)
	counts = verdicts(t, jsonEvents(t, out))
	if code != 0 || counts["pass"] != 1 || counts["fail"] != 0 {
		t.Errorf("a script with a daemon: exit %d, verdicts %v\n%s\n%s", code, counts, out, errs)
	}
	if got := junitCounts(t, report); got != "testsuites 1 0 0 1 0" {
		t.Errorf("JUnit report of the daemon's script %q", got)
	}

	// A JUnit file in a directory that does not exist is a usage error,
	// before anything runs.
	code, out, errs = runCLI(t, "test", "--junit", filepath.Join(dir, "no", "such", "r.xml"), dir)
	if code != 2 || out != "" || !strings.Contains(errs, "--junit") {
		t.Errorf("--junit in a missing directory: exit %d %q %q", code, out, errs)
	}
}

// TestSimplerTestFailFast: with -failfast and one script at a time nothing
// starts after the first failure; the scripts not run are reported as
// skipped, and count as neither passed nor failed.
func TestSimplerTestFailFast(t *testing.T) {
	t.Setenv(asCLI, "1")
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"a_fail.star":   "def main(ctx):\n    print(\"wrong\")\n",
		"a_fail.golden": "-- exit --\n0\n-- stdout --\nright\n-- stderr --\n",
		"b_slow.star":   "def main(ctx):\n    for i in range(100000000000):\n        pass\n",
		"b_slow.golden": "-- exit --\n0\n-- stdout --\n-- stderr --\n",
		"c_pass.star":   "def main(ctx):\n    pass\n",
		"c_pass.golden": "-- exit --\n0\n-- stdout --\n-- stderr --\n",
	})
	report := filepath.Join(t.TempDir(), "report.xml")
	start := time.Now()
	code, out, errs := runCLI(t, "test", "-failfast", "-p", "1", "-v", "--junit", report, dir)
	if code != 1 || !strings.HasSuffix(out, "0 passed, 1 failed\n") {
		t.Errorf("exit %d\n%s\n%s", code, out, errs)
	}
	// b_slow would run for minutes: it never started.
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("-failfast took %v: the slow script ran", took)
	}
	for _, want := range []string{"FAIL " + filepath.Join(dir, "a_fail.star"), "SKIP " + filepath.Join(dir, "b_slow.star"), "SKIP " + filepath.Join(dir, "c_pass.star")} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if got := junitCounts(t, report); got != "testsuites 3 1 2 3 1" {
		t.Errorf("JUnit report %q, want \"testsuites 3 1 2 3 1\"", got)
	}

	// In JSON, in process mode: one fail, two skips.
	code, out, _ = runCLI(t, "test", "-failfast", "-p", "1", "-json", "--mode", "process", dir)
	counts := verdicts(t, jsonEvents(t, out))
	if code != 1 || counts["fail"] != 1 || counts["skip"] != 2 || counts["pass"] != 0 {
		t.Errorf("-failfast -json: exit %d, verdicts %v", code, counts)
	}

	// Without -failfast every script runs: the passing one passes.
	code, out, _ = runCLI(t, "test", "-run", "a_fail|c_pass", dir)
	if code != 1 || !strings.HasSuffix(out, "1 passed, 1 failed\n") {
		t.Errorf("without -failfast: exit %d\n%s", code, out)
	}
}

// TestSimplerTestShowsNewOutput: a script without a golden file fails,
// and the report shows what it printed (what -update would write), in
// thread and process mode.
func TestSimplerTestShowsNewOutput(t *testing.T) {
	t.Setenv(asCLI, "1")
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"c_new.star": reportFiles["c_new.star"]})
	for _, mode := range []string{"thread", "process"} {
		code, out, _ := runCLI(t, "test", "--mode", mode, dir)
		for _, want := range []string{
			"no golden file " + filepath.Join(dir, "c_new.golden"),
			"    it printed:\n    | -- exit --\n    | 0\n    | -- stdout --\n    | brand new " + mode + "\n    | -- stderr --\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: output lacks %q:\n%s", mode, want, out)
			}
		}
		if code != 1 || !strings.HasSuffix(out, "0 passed, 1 failed\n") {
			t.Errorf("%s: exit %d\n%s", mode, code, out)
		}
	}
}
