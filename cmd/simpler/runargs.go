package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"simpler/golden"
	"simpler/kind"
)

// runOptions are the flags of `simpler run`.
type runOptions struct {
	runFlags
	trace    string
	profile  string // --cpuprofile
	maxSteps uint64
	noTags   bool // --no-tag-output
	det      detOptions
}

func (o *runOptions) register(fs *flag.FlagSet) {
	o.runFlags.register(fs)
	o.det.register(fs)
	fs.StringVar(&o.trace, "trace", "", "write a Chrome/Perfetto trace (JSON) of every task to `FILE`")
	fs.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of the whole run (go tool pprof) to `FILE`")
	fs.BoolVar(&o.noTags, "no-tag-output", false, "write the lines remote nodes print without their [node N] or [rank R] tag")
	fs.Uint64Var(&o.maxSteps, "max-steps", 0, "bound each Starlark thread of the script (main, each task of a thread-mode kernel, each module top level) to `N` steps; 0: no bound")
}

// runCommand is a parsed `simpler run` command line with the script's
// header applied: flags given on the command line override the header's.
type runCommand struct {
	opts    runOptions
	script  string
	argv    []string          // ctx.argv: everything after the script name
	header  []string          // the script's `# simpler-args:`
	fromHdr map[string]string // flags the header set, name → value
	given   map[string]string // flags the command line set, name → value
	daemons int               // the script's `# simpler-daemons: N`
}

// parseRun parses run's command line and the script's header. ok is false
// when run should stop with code (help was printed, or a usage error).
func parseRun(args []string, stdout, stderr io.Writer) (rc *runCommand, code int, ok bool) {
	fs := flagSet("run")
	rc = &runCommand{}
	rc.opts.register(fs)
	if code, ok := parseFlags("run", fs, args, nil, stdout, stderr); !ok {
		return nil, code, false
	}
	if fs.NArg() == 0 {
		return nil, usageError(stderr, "run", "no script given"), false
	}
	rc.script, rc.argv = fs.Arg(0), fs.Args()[1:]
	rc.given = setFlags(fs)
	if fi, err := os.Stat(rc.script); err != nil || fi.IsDir() {
		// A script that is not there is a wrong command line, as a bad
		// flag is: exit code 2, before anything starts.
		why := "no such file" + nearScript(rc.script)
		if err == nil {
			why = "a directory, not a script"
		} else if !errors.Is(err, iofs.ErrNotExist) {
			why = err.Error()
		}
		return nil, usageError(stderr, "run", "%s: %s", rc.script, why), false
	}
	if src, err := os.ReadFile(rc.script); err == nil { // else RunFile reports it, naming the path
		rc.header, rc.daemons = golden.ScriptArgs(src), golden.ScriptDaemons(src)
	}
	if len(rc.header) == 0 {
		return rc, 0, true
	}
	// The header first, then the command line again over it.
	fs = flagSet("run")
	rc.opts = runOptions{}
	rc.opts.register(fs)
	if err := fs.Parse(rc.header); err != nil || fs.NArg() > 0 {
		why := ""
		if err == nil {
			why = fmt.Sprintf("%q is not a flag of run", fs.Arg(0))
		} else {
			why = flagError(fs, err)
		}
		fmt.Fprintf(stderr, "simpler run: %s: its # simpler-args: line: %s\n", rc.script, why)
		return nil, 2, false
	}
	rc.fromHdr = setFlags(fs)
	if err := rc.checkHeader(); err != nil {
		fmt.Fprintf(stderr, "simpler run: %s: its # simpler-args: line: %v\n", rc.script, err)
		return nil, 2, false
	}
	if err := fs.Parse(args[:len(args)-len(rc.argv)-1]); err != nil {
		fmt.Fprintf(stderr, "simpler run: %s\n", flagError(fs, err))
		return nil, 2, false
	}
	return rc, 0, true
}

// nearScript suggests the .star file a user probably meant by a script
// that is not there ("first.sta" or "first" for first.star), or is "".
func nearScript(script string) string {
	guess := strings.TrimSuffix(script, filepath.Ext(script)) + ".star"
	if guess == script {
		return ""
	}
	if fi, err := os.Stat(guess); err == nil && fi.Mode().IsRegular() {
		return fmt.Sprintf(" (did you mean %s?)", guess)
	}
	return ""
}

// checkHeader refuses a header that sets a flag other than
// golden.HeaderFlags: a script's header never widens its own sandbox.
// --load-path would let load() read any file (and its errors print what
// they read), --trace would overwrite any file the user can write: only
// the person running the script chooses those, on the command line.
func (rc *runCommand) checkHeader() error {
	var refused []string
	for name := range rc.fromHdr {
		if !slices.Contains(golden.HeaderFlags, name) {
			refused = append(refused, name)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	slices.Sort(refused)
	name := refused[0]
	return kind.Errorf(kind.ValueError, "--%s is for the command line only: a script's header may set --%s, never what the script may read or write; pass --%s before the script's name",
		name, strings.Join(golden.HeaderFlags, ", --"), name)
}

// setFlags are the flags of fs that were set, name → value.
func setFlags(fs *flag.FlagSet) map[string]string {
	set := map[string]string{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = f.Value.String() })
	return set
}

// warnMisplacedFlags warns about arguments after the script name that are
// run's own flags: by convention they are the script's (ctx.argv), but a
// user who wrote `simpler run x.star --devices 0-3` meant run's.
func (rc *runCommand) warnMisplacedFlags(stderr io.Writer) {
	fs := flagSet("run")
	new(runOptions).register(fs)
	for _, arg := range rc.argv {
		name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if !strings.HasPrefix(arg, "-") || fs.Lookup(name) == nil {
			continue
		}
		fmt.Fprintf(stderr, "simpler run: warning: %s comes after the script name, so it goes to the script (ctx.argv), not to run; put run's flags before %s\n", arg, filepath.Base(rc.script))
	}
}

// startDaemons starts the daemons the script's header asks for when the
// command line gives the script no arguments; their addresses become
// ctx.argv. stop is nil when none were started.
func (rc *runCommand) startDaemons(stderr io.Writer) (stop func(), err error) {
	if rc.daemons == 0 || len(rc.argv) > 0 {
		return nil, nil
	}
	bin, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("RuntimeError: cannot start the script's daemons: %v", err)
	}
	var flags []string
	if rc.opts.race {
		flags = append(flags, "--race") // the daemons check what runs on them too
	}
	addrs, stop, err := golden.StartDaemons(bin, nil, rc.daemons, stderr, flags...)
	if err != nil {
		return nil, fmt.Errorf("RuntimeError: %s asks for %d remote-l3-worker daemon(s) (# simpler-daemons: %d): %v", rc.script, rc.daemons, rc.daemons, err)
	}
	rc.argv = addrs
	return stop, nil
}

// explainFailure adds, after a failed script, what its header asks for
// that this run did not give it: fewer daemon addresses than it declares,
// or a flag of its # simpler-args: line overridden on the command line.
func (rc *runCommand) explainFailure(stderr io.Writer) {
	name := filepath.Base(rc.script)
	if rc.daemons > 0 && len(rc.argv) < rc.daemons {
		fmt.Fprintf(stderr, "note: %s needs %d remote-l3-worker address(es) as arguments (# simpler-daemons: %d) and was given %d; run it with no arguments and simpler starts the daemons\n", name, rc.daemons, rc.daemons, len(rc.argv))
	}
	var names []string
	for flagName, v := range rc.fromHdr {
		if got, ok := rc.given[flagName]; ok && got != v {
			names = append(names, flagName)
		}
	}
	slices.Sort(names)
	for _, flagName := range names {
		fmt.Fprintf(stderr, "note: %s asks for --%s %s (# simpler-args: %s); this run overrode it with --%s %s\n", name, flagName, rc.fromHdr[flagName], strings.Join(rc.header, " "), flagName, rc.given[flagName])
	}
}
