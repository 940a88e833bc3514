package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fatih/color"

	"simpler/golden"
)

// testOptions are the flags of `simpler test` and what they make.
type testOptions struct {
	update, verbose bool
	parallel        int
	timeout         time.Duration
	platform        string
	devices         string
	mode            string
	loadPath        pathList
	maxSteps        uint64
	race            bool
	explore         exploreOptions
	runPattern      string
	json            bool   // one JSON event per line instead of text
	junit           string // also write a JUnit XML report to this file
	failFast        bool

	modes   []string
	runArgs []string       // the `simpler run` flags of every script but --mode
	filter  *regexp.Regexp // nil: every script
	paths   []string
}

func (o *testOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.update, "update", false, "rewrite each NAME.golden from the current output (of the first --mode)")
	fs.StringVar(&o.runPattern, "run", "", "only scripts whose path matches this `REGEXP`")
	fs.BoolVar(&o.verbose, "v", false, "also list the scripts that passed")
	fs.IntVar(&o.parallel, "p", runtime.NumCPU(), "`N` scripts run at once")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "time limit per script (a `DURATION` such as 90s)")
	fs.StringVar(&o.platform, "platform", golden.DefaultArgs[1], "--platform `P` each script runs with")
	fs.StringVar(&o.devices, "devices", golden.DefaultArgs[3], "--devices `IDS` each script runs with (before its own # simpler-args:)")
	fs.StringVar(&o.mode, "mode", "thread", "--mode each script runs with; thread,process runs each in both and checks both against one golden file (`MODES`)")
	fs.Var(&o.loadPath, "load-path", "--load-path `DIR` each script runs with (repeatable)")
	fs.Uint64Var(&o.maxSteps, "max-steps", 0, "--max-steps `N` each script runs with; 0: no bound")
	fs.StringVar(&o.explore.explore, "explore", "", "run every script `N` times under the deterministic scheduler, seeds S0, S0+1, ... (thread mode), and stop at the first seed whose outcome differs from the golden file, printing the command that replays it")
	fs.StringVar(&o.explore.seed, "seed", "", "the first seed `S0` of --explore (default 0)")
	fs.BoolVar(&o.race, "race", false, "run each script with --race: a data race or deadlock it reports fails the script (its report and exit status 66 differ from the golden file)")
	fs.BoolVar(&o.json, "json", false, "print one JSON event per line (run, output, pass, fail, skip), as go test -json does")
	fs.StringVar(&o.junit, "junit", "", "also write a JUnit XML report to `FILE`, for CI systems")
	fs.BoolVar(&o.failFast, "failfast", false, "start no script after the first failure (those running finish; the rest are reported as skipped)")
}

// cmdTest runs users' golden tests: every script in a fresh child process
// of this binary (`simpler run`), its exit code, stdout and stderr
// compared with NAME.golden. The last line is always "N passed, M failed"
// (with -json, the last output event; testreport.go prints the report,
// and --junit writes it as XML too). The runs themselves are
// simpler/golden's, as for the repository's own golden tests.
func cmdTest(args []string, stdout, stderr io.Writer) int {
	opts, code, ok := parseTestFlags(args, stdout, stderr)
	if !ok {
		return code
	}
	scripts, found, err := opts.scripts()
	if err != nil {
		fmt.Fprintf(stderr, "simpler test: %v\n", err)
		return 2
	}
	if len(scripts) == 0 {
		if found > 0 {
			fmt.Fprintf(stderr, "simpler test: --run %q matches none of the %d scripts found in %s\n", opts.runPattern, found, strings.Join(opts.paths, " "))
		} else {
			fmt.Fprintf(stderr, "simpler test: no scripts found in %s\n", strings.Join(opts.paths, " "))
		}
		rep := newTestReporter(opts, stdout)
		rep.finish(0, 0)
		if err := rep.writeJUnit(); err != nil {
			fmt.Fprintf(stderr, "simpler test: %v\n", err)
		}
		return 1
	}
	bin, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "simpler test: cannot find this binary: %v\n", err)
		return 2
	}

	// Ctrl-C stops every script (each runs in a process group of its own,
	// which the terminal's SIGINT does not reach) and still reports; the
	// exit status then says which signal it was (128 + its number).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var got atomic.Value
	go func() {
		select {
		case sig := <-sigs:
			got.Store(sig)
			cancel()
		case <-ctx.Done():
		}
	}()
	suite := &golden.Suite{
		Runner:   golden.Runner{Binary: bin, Timeout: opts.timeout, Context: ctx, Args: opts.runArgs},
		Modes:    opts.modes,
		Update:   opts.update,
		Parallel: opts.parallel,
		FailFast: opts.failFast,
	}
	if opts.explore.n > 0 {
		return explore(&opts.explore, suite, scripts, opts.runArgs, stdout, newPainter(stdout))
	}
	rep := newTestReporter(opts, stdout)
	passed, failed := suite.Run(suite.Jobs(scripts), rep.outcome)
	rep.finish(passed, failed)
	if err := rep.writeJUnit(); err != nil {
		fmt.Fprintf(stderr, "simpler test: %v\n", err)
		return 1
	}
	if sig, ok := got.Load().(os.Signal); ok {
		fmt.Fprintf(stderr, "simpler test: interrupted by %s\n", signalName(sig))
		return exitCode(sig)
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// parseTestFlags parses the flags of `simpler test`. ok is false when the
// command should stop with code (help was printed, or a usage error).
func parseTestFlags(args []string, stdout, stderr io.Writer) (opts *testOptions, code int, ok bool) {
	fs := flagSet("test")
	opts = &testOptions{}
	opts.register(fs)
	if code, ok := parseFlags("test", fs, args, func() error { return parseInterspersed(fs, args) }, stdout, stderr); !ok {
		return nil, code, false
	}
	fail := func(err error) (*testOptions, int, bool) {
		return nil, usageError(stderr, "test", "%v", err), false
	}
	var err error
	if opts.modes, err = testModes(opts.mode); err != nil {
		return fail(err)
	}
	if err = opts.explore.parse(); err != nil {
		return fail(err)
	}
	if opts.runArgs, err = scriptRunArgs(opts.platform, opts.devices, opts.loadPath, opts.maxSteps, opts.race); err != nil {
		return fail(err)
	}
	if opts.runPattern != "" {
		if opts.filter, err = regexp.Compile(opts.runPattern); err != nil {
			return fail(fmt.Errorf("--run: %v", err))
		}
	}
	if opts.junit != "" {
		if fi, err := os.Stat(filepath.Dir(opts.junit)); err != nil || !fi.IsDir() {
			return fail(fmt.Errorf("--junit %s: its directory does not exist", opts.junit))
		}
	}
	opts.paths = fs.Args()
	if len(opts.paths) == 0 {
		opts.paths = []string{"."}
	}
	return opts, 0, true
}

// testModes splits --mode: one mode, or several separated by commas.
func testModes(s string) ([]string, error) {
	modes := strings.Split(s, ",")
	for i, m := range modes {
		if m != "thread" && m != "process" {
			return nil, fmt.Errorf("--mode must be thread, process or both separated by a comma, got %q", s)
		}
		if slices.Contains(modes[:i], m) {
			return nil, fmt.Errorf("--mode %s: %s twice", s, m)
		}
	}
	return modes, nil
}

// scripts are the scripts found in the paths that --run selects; found
// counts all that were found.
func (opts *testOptions) scripts() (scripts []string, found int, err error) {
	all, err := golden.Find(opts.paths)
	if err != nil {
		return nil, 0, err
	}
	for _, s := range all {
		if opts.filter == nil || opts.filter.MatchString(s) {
			scripts = append(scripts, s)
		}
	}
	return scripts, len(all), nil
}

// reportOutcome prints one script's verdict: UPDATED and FAIL always, PASS
// with -v, SKIP for a script -failfast did not start; a failure with its
// problem and its diff, or with what it printed when it has no golden
// file yet. withMode names the mode, for runs in several.
func reportOutcome(w io.Writer, paint painter, o golden.Outcome, verbose, withMode bool) {
	name := o.Script
	if withMode {
		name += " [" + o.Mode + "]"
	}
	secs := fmt.Sprintf("(%.2fs)", o.Elapsed.Seconds())
	switch {
	case o.NotRun:
		if verbose {
			fmt.Fprintf(w, "SKIP %s (%s)\n", name, o.Problem)
		}
	case o.Passed && o.Updated:
		fmt.Fprintf(w, "%s %s %s\n", paint.green("UPDATED"), name, secs)
	case o.Passed:
		if verbose {
			fmt.Fprintf(w, "%s %s %s\n", paint.green("PASS"), name, secs)
		}
	default:
		fmt.Fprintf(w, "%s %s %s\n", paint.red("FAIL"), name, secs)
		if o.Problem != "" {
			fmt.Fprintf(w, "    %s\n", o.Problem)
		}
		if o.Diff != "" {
			fmt.Fprint(w, paint.diff(o.Diff))
		}
		if o.Got != "" {
			fmt.Fprintf(w, "    it printed:\n%s", indent(o.Got, "    | "))
		}
	}
}

// scriptRunArgs are the `simpler run` flags of every script but --mode
// (each golden.Suite job adds its own). Each script runs in its own
// directory, so a relative --load-path is made absolute here.
func scriptRunArgs(platform, devices string, loadPath []string, maxSteps uint64, race bool) ([]string, error) {
	args := []string{"--platform", platform, "--devices", devices}
	for _, dir := range loadPath {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("--load-path %s: not a directory", dir)
		}
		args = append(args, "--load-path", abs)
	}
	if maxSteps > 0 {
		args = append(args, "--max-steps", strconv.FormatUint(maxSteps, 10))
	}
	if race {
		args = append(args, "--race")
	}
	return args, nil
}

// parseInterspersed parses flags that may come before, between or after
// the positional arguments ("simpler test dir -update").
func parseInterspersed(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" { // everything after -- is positional
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	return fs.Parse(append([]string{"--"}, pos...))
}

// painter colours text for a terminal, and not otherwise or when NO_COLOR
// is set.
type painter struct{ on bool }

func newPainter(w io.Writer) painter { return painter{on: colorable(w)} }

// colorable reports whether w should get colour: a terminal, and
// NO_COLOR unset or empty.
func colorable(w io.Writer) bool {
	if os.Getenv("NO_COLOR") != "" {
		return false
	}
	f, ok := w.(*os.File)
	return ok && isTerminal(int(f.Fd()))
}

func (p painter) paint(attr color.Attribute, s string) string {
	c := color.New(attr)
	if p.on {
		c.EnableColor()
	} else {
		c.DisableColor()
	}
	return c.Sprint(s)
}

func (p painter) red(s string) string   { return p.paint(color.FgRed, s) }
func (p painter) green(s string) string { return p.paint(color.FgGreen, s) }
func (p painter) cyan(s string) string  { return p.paint(color.FgCyan, s) }

// diff indents a unified diff and colours its removed and added lines.
func (p painter) diff(d string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(d, "\n") {
		if line == "" {
			continue
		}
		text := strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(text, "---"), strings.HasPrefix(text, "+++"):
		case strings.HasPrefix(text, "@@"):
			text = p.cyan(text)
		case strings.HasPrefix(text, "-"):
			text = p.red(text)
		case strings.HasPrefix(text, "+"):
			text = p.green(text)
		}
		b.WriteString("    " + text + "\n")
	}
	return b.String()
}
