// Package golden runs every .star script under tests/golden and
// scripts/examples through the real simpler binary and compares its exit
// code, stdout and stderr with the NAME.golden file beside the script.
//
// Run with -update to rewrite the golden files from the current output.
// A script may ask for other flags with a first-lines comment:
//
//	# simpler-args: --devices 0-7 --platform a5sim
package golden

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"simpler/hal/shm"
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
	for _, script := range scripts {
		name := strings.TrimSuffix(filepath.Base(script), ".star")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runGolden(t, script)
		})
	}
}

// result is what one run of a script produced.
type result struct {
	exit           int
	stdout, stderr string
}

func (r result) format() string {
	return fmt.Sprintf("-- exit --\n%d\n-- stdout --\n%s-- stderr --\n%s", r.exit, r.stdout, r.stderr)
}

var scriptArgs = regexp.MustCompile(`(?m)^# simpler-args:(.*)$`)

func runGolden(t *testing.T, script string) {
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--platform", "a2a3sim", "--devices", "0-3"}
	if m := scriptArgs.FindSubmatch(src); m != nil {
		args = append(args, strings.Fields(string(m[1]))...)
	}
	args = append(args, filepath.Base(script))
	got := run(t, filepath.Dir(script), args)
	goldenPath := strings.TrimSuffix(script, ".star") + ".golden"
	if *update {
		if err := os.WriteFile(goldenPath, []byte(got.format()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got.format() != string(want) {
		t.Errorf("%s: output differs from %s\n%s", script, goldenPath, diff(string(want), got.format()))
	}
}

func run(t *testing.T, dir string, args []string) result {
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "SIMPLER_PLATFORM=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.Process != nil {
		prefix := fmt.Sprintf("simpler-%d-", cmd.Process.Pid)
		if left, _ := shm.Leftovers(prefix); len(left) > 0 {
			t.Errorf("%v left shared-memory objects behind: %v", args, left)
			for _, name := range left {
				os.Remove("/dev/shm/" + name)
			}
		}
	}
	r := result{stdout: normalize(stdout.String()), stderr: normalize(stderr.String())}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.exit = exit.ExitCode()
	case err != nil:
		t.Fatalf("running %v: %v", args, err)
	}
	return r
}

// Host addresses change from run to run; golden files show them as 0xADDR.
var hexAddr = regexp.MustCompile(`0x[0-9a-f]{6,}`)

func normalize(s string) string { return hexAddr.ReplaceAllString(s, "0xADDR") }

// diff shows the first differing line with some context.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  want: %q\n  got:  %q\n--- full output ---\n%s", i+1, wl, gl, got)
		}
	}
	return ""
}
