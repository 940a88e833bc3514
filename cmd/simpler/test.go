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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fatih/color"

	"simpler/golden"
)

const testUsage = "usage: simpler test [-update] [-run regex] [-v] [-p N] [-timeout D] [--platform P] [--devices 0-3] [--load-path DIR]... [--max-steps N] [paths...]"

// cmdTest runs users' golden tests: every script in a fresh child process
// of this binary (`simpler run`), its exit code, stdout and stderr
// compared with NAME.golden. The last line is always "N passed, M failed".
func cmdTest(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, testUsage)
		fs.PrintDefaults()
	}
	update := fs.Bool("update", false, "rewrite each NAME.golden from the current output")
	runPat := fs.String("run", "", "only scripts whose path matches this regular expression")
	verbose := fs.Bool("v", false, "also list the scripts that passed")
	parallel := fs.Int("p", runtime.NumCPU(), "scripts run at once")
	timeout := fs.Duration("timeout", 10*time.Minute, "time limit per script")
	platform := fs.String("platform", golden.DefaultArgs[1], "--platform each script runs with")
	devices := fs.String("devices", golden.DefaultArgs[3], "--devices each script runs with")
	mode := fs.String("mode", "thread", "--mode each script runs with")
	var loadPath pathList
	fs.Var(&loadPath, "load-path", "--load-path each script runs with (repeatable)")
	maxSteps := fs.Uint64("max-steps", 0, "--max-steps each script runs with; 0: no bound")
	if err := parseInterspersed(fs, args); err != nil {
		return 2
	}
	runArgs, err := scriptRunArgs(*platform, *devices, *mode, loadPath, *maxSteps)
	if err != nil {
		fmt.Fprintf(stderr, "simpler test: %v\n", err)
		return 2
	}
	var re *regexp.Regexp
	if *runPat != "" {
		if re, err = regexp.Compile(*runPat); err != nil {
			fmt.Fprintf(stderr, "simpler test: -run: %v\n", err)
			return 2
		}
	}
	if *parallel < 1 {
		*parallel = 1
	}
	bin, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "simpler test: cannot find this binary: %v\n", err)
		return 2
	}
	paths := fs.Args()
	if len(paths) == 0 {
		paths = []string{"."}
	}
	all, err := golden.Find(paths)
	if err != nil {
		fmt.Fprintf(stderr, "simpler test: %v\n", err)
		return 2
	}
	var scripts []string
	for _, s := range all {
		if re == nil || re.MatchString(s) {
			scripts = append(scripts, s)
		}
	}
	if len(scripts) == 0 {
		fmt.Fprintf(stderr, "simpler test: no scripts found in %s\n", strings.Join(paths, " "))
		fmt.Fprintln(stdout, "0 passed, 0 failed")
		return 1
	}

	// Ctrl-C stops every script (each runs in a process group of its own,
	// which the terminal's SIGINT does not reach) and still reports.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	runner := &golden.Runner{Binary: bin, Timeout: *timeout, Context: ctx, Args: runArgs}
	outcomes := make([]chan golden.Outcome, len(scripts))
	for i := range outcomes {
		outcomes[i] = make(chan golden.Outcome, 1)
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range min(*parallel, len(scripts)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				outcomes[i] <- runner.Check(scripts[i], *update)
			}
		}()
	}
	go func() {
		defer close(jobs)
		for i := range scripts {
			select {
			case jobs <- i:
			case <-ctx.Done(): // the rest are reported as interrupted
				for ; i < len(scripts); i++ {
					outcomes[i] <- golden.Outcome{Script: scripts[i], Problem: "interrupted before it ran"}
				}
				return
			}
		}
	}()

	paint := newPainter(stdout)
	passed, failed := 0, 0
	for i := range scripts { // report in order, each as soon as it and those before it are done
		o := <-outcomes[i]
		secs := fmt.Sprintf("(%.2fs)", o.Elapsed.Seconds())
		switch {
		case o.Passed && o.Updated:
			passed++
			fmt.Fprintf(stdout, "%s %s %s\n", paint.green("UPDATED"), o.Script, secs)
		case o.Passed:
			passed++
			if *verbose {
				fmt.Fprintf(stdout, "%s %s %s\n", paint.green("PASS"), o.Script, secs)
			}
		default:
			failed++
			fmt.Fprintf(stdout, "%s %s %s\n", paint.red("FAIL"), o.Script, secs)
			if o.Problem != "" {
				fmt.Fprintf(stdout, "    %s\n", o.Problem)
			}
			if o.Diff != "" {
				fmt.Fprint(stdout, paint.diff(o.Diff))
			}
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "simpler test: interrupted")
	}
	fmt.Fprintf(stdout, "%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return 1
	}
	return 0
}

// scriptRunArgs are the `simpler run` flags of every script. Each runs in
// its own directory, so a relative --load-path is made absolute here.
func scriptRunArgs(platform, devices, mode string, loadPath []string, maxSteps uint64) ([]string, error) {
	args := []string{"--platform", platform, "--devices", devices, "--mode", mode}
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
