// Package golden runs every .star script under tests/golden and
// scripts/examples through the real simpler binary, in thread mode and in
// process mode, and compares its exit code, stdout and stderr with the
// NAME.golden file beside the script. Everything but building the binary
// is simpler/golden, the same code `simpler test` runs: finding the
// scripts, the runs each gets, comparing, -update, `# simpler-args:` and
// `# simpler-daemons:`.
//
// Run with -update to rewrite the golden files from the thread-mode
// output; run again without it to check process mode too.
package golden

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"simpler/golden"
	"simpler/internal/leakcheck"
	"simpler/internal/mpitest"
)

var update = flag.Bool("update", false, "rewrite golden files")

var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "simpler-golden-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "simpler")
	build := exec.Command("go", "build", "-race", "-o", binary, "simpler/cmd/simpler")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	code := 1
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building simpler:", err)
	} else {
		code = leakcheck.Run(m)
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestGolden(t *testing.T) {
	scripts, err := golden.Find([]string{".", "../../scripts/examples"})
	if err != nil {
		t.Fatal(err)
	}
	if len(scripts) == 0 {
		t.Fatal("no golden scripts found")
	}
	// The metamorphic check: every script gives the same output with its
	// workers' children as goroutines and as processes. Process-mode runs
	// go one at a time (Exclusive); Go's test runner runs the others in
	// parallel, after them.
	suite := &golden.Suite{
		Runner:    golden.Runner{Binary: binary, Env: mpitest.Env()}, // mpirun_group.star's mpirun, when root
		Modes:     []string{"thread", "process"},
		Exclusive: []string{"process"},
		Update:    *update,
	}
	for _, job := range suite.Jobs(scripts) {
		t.Run(job.Name(), func(t *testing.T) {
			if !job.Exclusive {
				t.Parallel()
			}
			if !mpitest.Script(t, job.Script) { // mpirun_group.star without mpirun: fails under CI, said loudly elsewhere
				return
			}
			o := job.Run()
			if o.Problem != "" {
				t.Error(o.Problem)
			}
			if o.Diff != "" {
				t.Errorf("%s (%s mode): output differs from %s\n%s", o.Script, o.Mode, golden.GoldenPath(o.Script), o.Diff)
			}
		})
	}
}
