package golden

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestSuiteJobs(t *testing.T) {
	scripts := []string{"a/x.star", "y.star"}
	s := &Suite{Runner: Runner{Binary: "simpler"}, Modes: []string{"thread", "process"}, Exclusive: []string{"process"}}
	var got []string
	for _, j := range s.Jobs(scripts) {
		got = append(got, j.Name()+" "+strings.Join(j.runner.Args, " "))
		if j.Exclusive != (j.Mode == "process") || j.Update {
			t.Errorf("%s: exclusive %v update %v", j.Name(), j.Exclusive, j.Update)
		}
	}
	want := []string{
		"thread/x --platform a2a3sim --devices 0,1 --mode thread",
		"thread/y --platform a2a3sim --devices 0,1 --mode thread",
		"process/x --platform a2a3sim --devices 0,1 --mode process",
		"process/y --platform a2a3sim --devices 0,1 --mode process",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("jobs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if DefaultArgs[len(DefaultArgs)-1] != "0,1" {
		t.Errorf("a job's --mode was appended to DefaultArgs itself: %q", DefaultArgs)
	}

	// Update rewrites from the first mode only.
	s.Update = true
	jobs := s.Jobs(scripts)
	if len(jobs) != 2 || jobs[0].Mode != "thread" || !jobs[0].Update || !jobs[1].Update {
		t.Errorf("update jobs: %+v", jobs)
	}

	// Without Modes: one job per script, with the Runner's own Args.
	s = &Suite{Runner: Runner{Args: []string{"--devices", "0"}}}
	jobs = s.Jobs(scripts)
	if len(jobs) != 2 || jobs[0].Name() != "x" || jobs[0].Mode != "" || strings.Join(jobs[0].runner.Args, " ") != "--devices 0" {
		t.Errorf("jobs without modes: %+v", jobs)
	}
}

// TestSuiteRun drives a stand-in binary through Suite.Run in two modes: a
// script whose output does not depend on the mode passes in both, one
// whose output does fails the metamorphic check in the second; outcomes
// come in job order; exclusive runs never overlap.
func TestSuiteRun(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal("no sh:", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-simpler")
	// Prints "same" for same*.star, its arguments otherwise. A process-mode
	// run holds the directory "lock" for a while: a second one at the
	// same time fails to make it.
	script := "#!" + sh + `
case "$*" in *"--mode process"*)
	mkdir ` + dir + `/lock || { echo "two process-mode runs at once"; exit 9; }
	sleep 0.1
	rmdir ` + dir + `/lock;;
esac
case "$*" in *same*.star) echo same;; *) echo "args: $*";; esac
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var scripts []string
	for _, name := range []string{"same1", "same2", "same3", "differs"} {
		p := filepath.Join(dir, name+".star")
		scripts = append(scripts, p)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &Suite{Runner: Runner{Binary: bin}, Modes: []string{"thread", "process"}, Exclusive: []string{"process"}, Parallel: 4, Update: true}

	// Update writes the golden files from thread mode.
	passed, failed := s.Run(s.Jobs(scripts), func(o Outcome) {
		if !o.Updated || o.Mode != "thread" {
			t.Errorf("update: %+v", o)
		}
	})
	s.Update = false
	if passed != 4 || failed != 0 {
		t.Fatalf("update: %d passed, %d failed", passed, failed)
	}

	var got []string
	passed, failed = s.Run(s.Jobs(scripts), func(o Outcome) {
		verdict := "pass"
		if !o.Passed {
			verdict = "fail " + o.Problem
			if o.Diff != "" {
				verdict += "diff"
			}
		}
		got = append(got, o.Mode+"/"+filepath.Base(o.Script)+" "+verdict)
	})
	want := []string{
		"thread/same1.star pass", "thread/same2.star pass", "thread/same3.star pass", "thread/differs.star pass",
		"process/same1.star pass", "process/same2.star pass", "process/same3.star pass", "process/differs.star fail diff",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || passed != 7 || failed != 1 {
		t.Errorf("%d passed, %d failed:\n%s\nwant:\n%s", passed, failed, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSuiteRunInterrupted: with the context cancelled, every job fails as
// interrupted, whether it had started or not.
func TestSuiteRunInterrupted(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal("no sh:", err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "x.star")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := &Suite{Runner: Runner{Binary: sh, Context: ctx}, Parallel: 2}
	passed, failed := s.Run(s.Jobs([]string{p, p, p}), func(o Outcome) {
		if o.Passed || !strings.Contains(o.Problem, "interrupted") {
			t.Errorf("outcome %+v", o)
		}
	})
	if passed != 0 || failed != 3 {
		t.Errorf("%d passed, %d failed", passed, failed)
	}
}

// TestSuiteFailFast: with FailFast and one job at a time, no job starts
// after the first failure: the stand-in binary logs every run, and the
// jobs after the failure are reported NotRun, counted as neither passed
// nor failed. Without FailFast every job runs.
func TestSuiteFailFast(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal("no sh:", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-simpler")
	log := filepath.Join(dir, "runs.log")
	script := "#!" + sh + `
echo "$*" >> ` + log + `
case "$*" in *bad*.star) exit 3;; esac
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var scripts []string
	for _, name := range []string{"a_good", "b_bad", "c_good", "d_good"} {
		p := filepath.Join(dir, name+".star")
		scripts = append(scripts, p)
		golden := "-- exit --\n0\n-- stdout --\n-- stderr --\n"
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(GoldenPath(p), []byte(golden), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &Suite{Runner: Runner{Binary: bin}, Parallel: 1, FailFast: true}
	var got []string
	passed, failed := s.Run(s.Jobs(scripts), func(o Outcome) {
		got = append(got, filepath.Base(o.Script)+" "+verdictOf(o))
	})
	want := "a_good.star pass\nb_bad.star fail\nc_good.star notrun\nd_good.star notrun"
	if strings.Join(got, "\n") != want || passed != 1 || failed != 1 {
		t.Errorf("%d passed, %d failed:\n%s\nwant:\n%s", passed, failed, strings.Join(got, "\n"), want)
	}
	runs, err := os.ReadFile(log)
	if err != nil || strings.Count(string(runs), "\n") != 2 || strings.Contains(string(runs), "c_good") {
		t.Errorf("runs logged: %q, %v; want a_good and b_bad only", runs, err)
	}

	s.FailFast = false
	passed, failed = s.Run(s.Jobs(scripts), func(Outcome) {})
	if passed != 3 || failed != 1 {
		t.Errorf("without FailFast: %d passed, %d failed", passed, failed)
	}
}

func verdictOf(o Outcome) string {
	switch {
	case o.NotRun:
		return "notrun"
	case o.Passed:
		return "pass"
	}
	return "fail"
}
