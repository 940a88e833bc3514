// Package golden runs every .star script under tests/golden and
// scripts/examples through the real simpler binary and compares its exit
// code, stdout and stderr with the NAME.golden file beside the script.
// The runner is simpler/golden, the same one `simpler test` uses.
//
// Run with -update to rewrite the golden files from the current output.
// A script may ask for other flags with a first-lines comment:
//
//	# simpler-args: --devices 0-7 --platform a5sim
package golden

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"simpler/golden"
	"simpler/internal/leakcheck"
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
	var scripts []string
	for _, pattern := range []string{"*.star", "../../scripts/examples/*.star"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		scripts = append(scripts, m...)
	}
	if len(scripts) == 0 {
		t.Fatal("no golden scripts found")
	}
	// The metamorphic check: every script gives the same output with its
	// workers' children as goroutines and as processes. Golden files are
	// written from thread mode and checked in both.
	for _, mode := range []string{"thread", "process"} {
		runner := &golden.Runner{Binary: binary, Args: append(append([]string(nil), golden.DefaultArgs...), "--mode", mode)}
		for _, script := range scripts {
			name := strings.TrimSuffix(filepath.Base(script), ".star")
			t.Run(mode+"/"+name, func(t *testing.T) {
				// Process mode starts up to 17 processes a script; one
				// script at a time keeps the two cores from starving them.
				if mode == "thread" {
					t.Parallel()
				}
				o := runner.Check(script, *update && mode == "thread")
				if o.Problem != "" {
					t.Error(o.Problem)
				}
				if o.Diff != "" {
					t.Errorf("%s (%s mode): output differs from %s\n%s", script, mode, golden.GoldenPath(script), o.Diff)
				}
			})
		}
	}
}
