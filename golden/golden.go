// Package golden runs .star scripts through the simpler binary and
// compares what they did with the NAME.golden file beside each script.
// It is the one implementation behind `simpler test` and the repository's
// own golden tests (tests/golden): a Runner runs and checks one script
// (starting the daemons it asks for); a Suite plans the runs of many
// (one per mode for the thread/process metamorphic check; which may
// rewrite golden files) and runs them in parallel, reporting in order.
//
// A golden file holds three sections:
//
//	-- exit --
//	0
//	-- stdout --
//	...
//	-- stderr --
//	...
//
// Host addresses change from run to run, so every 0x followed by six or
// more hex digits is written as 0xADDR before comparing. A script may add
// arguments of its own, and ask for remote-l3-worker daemons whose
// addresses follow its name on its command line (ctx.argv), with comment
// lines:
//
//	# simpler-args: --devices 0-7 --platform a5sim
//	# simpler-daemons: 2
//
// A header may set only HeaderFlags; one that sets another flag is not
// passed on, and `simpler run` refuses it.
package golden

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"simpler/hal/shm"
)

// DefaultArgs are the arguments every script is run with, before its own
// `# simpler-args:`: a fixed platform, so that a golden file does not
// depend on the environment, and the devices `simpler run` defaults to,
// so that a script runs the same under `simpler run` and `simpler test`.
var DefaultArgs = []string{"--platform", "a2a3sim", "--devices", "0,1"}

// Result is what one run of a script did.
type Result struct {
	Exit           int
	Stdout, Stderr string
}

// Format is the golden-file text of r.
func (r Result) Format() string {
	return fmt.Sprintf("-- exit --\n%d\n-- stdout --\n%s-- stderr --\n%s", r.Exit, r.Stdout, r.Stderr)
}

var hexAddr = regexp.MustCompile(`0x[0-9a-f]{6,}`)

// Normalize replaces host addresses by 0xADDR.
func Normalize(s string) string { return hexAddr.ReplaceAllString(s, "0xADDR") }

var scriptArgs = regexp.MustCompile(`(?m)^# simpler-args:(.*)$`)

// HeaderFlags are the only flags of run a script's `# simpler-args:` line
// may set: what it runs on, never what it may read or write. A header
// that sets another (--load-path, --trace, --max-steps) would widen the
// script's own sandbox; `simpler run` refuses it, and those come from the
// command line only.
var HeaderFlags = []string{"platform", "devices", "mode"}

// flagName is the name of the flag arg spells ("--load-path=/x" and
// "-load-path" are both load-path), and whether arg is a flag at all.
func flagName(arg string) (name string, ok bool) {
	if len(arg) < 2 || arg[0] != '-' {
		return "", false
	}
	name, _, _ = strings.Cut(strings.TrimPrefix(arg[1:], "-"), "=")
	return name, true
}

// headerAllowed reports whether every flag of a script's header is one
// of HeaderFlags.
func headerAllowed(args []string) bool {
	for _, a := range args {
		if name, ok := flagName(a); ok && !slices.Contains(HeaderFlags, name) {
			return false
		}
	}
	return true
}

// ScriptArgs returns the arguments a script asks for in its
// `# simpler-args:` line, if any.
func ScriptArgs(src []byte) []string {
	if m := scriptArgs.FindSubmatch(src); m != nil {
		return strings.Fields(string(m[1]))
	}
	return nil
}

var scriptDaemons = regexp.MustCompile(`(?m)^# simpler-daemons:\s*(\d+)\s*$`)

// ScriptDaemons is how many remote-l3-worker daemons a script asks for
// with a `# simpler-daemons: N` line; their addresses follow the script
// name on its command line (ctx.argv).
func ScriptDaemons(src []byte) int {
	m := scriptDaemons.FindSubmatch(src)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// GoldenPath is the golden file of a script: NAME.star → NAME.golden.
func GoldenPath(script string) string { return strings.TrimSuffix(script, ".star") + ".golden" }

// Runner runs scripts with a simpler binary, each in a fresh process.
type Runner struct {
	Binary  string          // the simpler executable
	Args    []string        // after "run" and before the script's own; nil means DefaultArgs
	Env     []string        // added to the environment (NO_COLOR=1 and SIMPLER_PLATFORM= always are)
	Timeout time.Duration   // per script; 0 means none
	Context context.Context // cancelling it kills the running scripts; nil means none
}

// Run runs script in its own directory as `simpler run ARGS NAME.star`.
// leaks lists the shared-memory objects the process left behind (they are
// removed). err is set only when the script could not be run at all or
// ran out of time.
func (r *Runner) Run(script string) (res Result, leaks []string, err error) {
	src, err := os.ReadFile(script)
	if err != nil {
		return res, nil, err
	}
	args := append([]string{"run"}, r.Args...)
	if r.Args == nil {
		args = append(args, DefaultArgs...)
	}
	// The header goes after the runner's arguments, to override them,
	// only when it sets nothing but HeaderFlags: otherwise `simpler run`
	// reads it itself and refuses it, and it must not reach the command
	// line, where those flags are allowed.
	if hdr := ScriptArgs(src); headerAllowed(hdr) {
		args = append(args, hdr...)
	}
	args = append(args, filepath.Base(script))
	if n := ScriptDaemons(src); n > 0 {
		var flags []string
		if slices.Contains(r.Args, "--race") {
			flags = append(flags, "--race") // the script's daemons check what runs on them too, as simpler run's do
		}
		addrs, stop, err := StartDaemons(r.Binary, r.Env, n, os.Stderr, flags...)
		if err != nil {
			return res, nil, fmt.Errorf("%s: %v", script, err)
		}
		defer stop()
		args = append(args, addrs...)
	}

	parent := r.Context
	if parent == nil {
		parent = context.Background()
	}
	ctx := parent
	if r.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.Timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, r.Binary, args...)
	cmd.Dir = filepath.Dir(script)
	// A shm prefix of its own, so that what it leaves is found by name.
	prefix := shm.NewPrefix()
	cmd.Env = append(append(os.Environ(), "NO_COLOR=1", "SIMPLER_PLATFORM="), append(r.Env, shm.PrefixEnv+"="+prefix)...)
	// Its own process group, so that a timeout also stops any child
	// processes the script started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if cmd.Process != nil {
		leaks, _ = shm.Leftovers(prefix)
		// Removed once proven dead: the process and those it started
		// have let go of the prefix's lock.
		shm.SweepPrefix(prefix)
	}
	res = Result{Stdout: Normalize(stdout.String()), Stderr: Normalize(stderr.String())}
	var exit *exec.ExitError
	switch {
	case parent.Err() != nil:
		return res, leaks, fmt.Errorf("%s: interrupted", script)
	case ctx.Err() != nil:
		return res, leaks, fmt.Errorf("%s: still running after %v; killed", script, r.Timeout)
	case errors.As(runErr, &exit):
		res.Exit = exit.ExitCode()
	case runErr != nil:
		return res, leaks, fmt.Errorf("running %s: %v", script, runErr)
	}
	return res, leaks, nil
}

// Outcome is the verdict on one script.
type Outcome struct {
	Script  string
	Mode    string // the job's mode, "" when its Suite has no Modes
	Passed  bool
	Updated bool          // the golden file was (re)written
	Diff    string        // want → got, when the output differs
	Problem string        // why it failed otherwise: no golden file, a leak, a timeout
	Elapsed time.Duration // how long the script ran
	// Got is what the script printed, in the golden file's format, when
	// it had no golden file to compare with: what -update would write.
	Got string
	// NotRun: the job never started, because an earlier one failed under
	// Suite.FailFast. It counts as neither passed nor failed.
	NotRun bool
}

// Check runs script and compares its result with its golden file, or
// with update set, rewrites the golden file.
func (r *Runner) Check(script string, update bool) Outcome {
	o := Outcome{Script: script}
	start := time.Now()
	got, leaks, err := r.Run(script)
	o.Elapsed = time.Since(start)
	var problems []string
	if err != nil {
		problems = append(problems, err.Error())
	}
	if len(leaks) > 0 {
		problems = append(problems, fmt.Sprintf("left shared-memory objects behind: %v", leaks))
	}
	golden := GoldenPath(script)
	if err == nil && update {
		if werr := os.WriteFile(golden, []byte(got.Format()), 0o644); werr != nil {
			problems = append(problems, werr.Error())
		} else {
			o.Updated = true
		}
	} else if err == nil {
		want, rerr := os.ReadFile(golden)
		switch {
		case errors.Is(rerr, fs.ErrNotExist):
			problems = append(problems, fmt.Sprintf("no golden file %s (run with -update to create it)", golden))
			o.Got = got.Format()
		case rerr != nil:
			problems = append(problems, rerr.Error())
		case string(want) != got.Format():
			o.Diff = Diff(golden, "got", string(want), got.Format())
		}
	}
	o.Problem = strings.Join(problems, "; ")
	o.Passed = o.Problem == "" && o.Diff == ""
	return o
}

// mainDef finds a script's entry point.
var mainDef = regexp.MustCompile(`(?m)^def main\(`)

// Find returns the scripts named by paths, sorted: a file is taken as
// given; a directory is searched recursively for .star files that have a
// golden file beside them or define main() (library modules have
// neither).
func Find(paths []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		p = filepath.Clean(p)
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			add(p)
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !strings.HasSuffix(path, ".star") {
				return nil
			}
			if _, err := os.Stat(GoldenPath(path)); err == nil {
				add(path)
				return nil
			}
			if src, err := os.ReadFile(path); err == nil && mainDef.Match(src) {
				add(path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(out)
	return out, nil
}
