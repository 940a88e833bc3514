package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime/debug"
	"strings"
)

// command is one subcommand of the CLI as its help describes it. A
// command with flags registers them on a FlagSet in flags, so that
// `simpler help NAME` can print them without running it.
type command struct {
	name    string
	args    string // what follows the flags in the synopsis, e.g. "script.star [ARGS...]"
	summary string
	flags   func(fs *flag.FlagSet) // nil: the command takes no flags
}

// commands are the public subcommands, in the order help lists them.
var commands = []command{
	{"run", "script.star [ARGS...]", "Load script.star and call its main(ctx). ARGS become ctx.argv; a flag after the script name is the script's, not run's. The script's header may give defaults: --platform, --devices and --mode on a simpler-args line (flags here override them; any other flag there is refused: pass it here), and a simpler-daemons line, for which run starts that many remote-l3-worker daemons on 127.0.0.1 when no ARGS are given (their addresses become ctx.argv).",
		func(fs *flag.FlagSet) { new(runOptions).register(fs) }},
	{"repl", "", "An interactive Starlark shell with a ready Worker w (see docs/repl.md).",
		func(fs *flag.FlagSet) { registerReplFlags(fs) }},
	{"test", "[paths...]", "Run .star scripts and compare their exit code, stdout and stderr with NAME.golden beside each; the last line is \"N passed, M failed\".",
		func(fs *flag.FlagSet) { new(testOptions).register(fs) }},
	{"remote-l3-worker", "", "Serve remote level-3 nodes to level-4 workers over TCP; each connection that proves the token gets a session process of its own. With --connect it is instead a rank of a worker group (add_worker_group, started by mpirun, srun or a Kubernetes Indexed Job): it dials its level-4 worker, both sides prove the token, and it serves that worker's one session, then exits.",
		func(fs *flag.FlagSet) { new(remoteOptions).register(fs) }},
	{"doc", "[name]", "Print the script builtins with their signatures: all of them, or those matching a global, a type such as Worker, Type.member, a call name such as w.register, or the collectives library (collectives, allreduce); an unknown name gets the closest entries.", nil},
	{"bench", "[" + strings.Join(benchNames(), "|") + "]...", "Run the benchmarks, each against a limit measured in the same run (all of them when none is named).", nil},
	{"platforms", "", "Print each platform's capabilities and whether it is available here (--json: as JSON).",
		func(fs *flag.FlagSet) { new(platformsOptions).register(fs) }},
	{"completion", "bash|zsh", "Print a completion script for the shell: source <(simpler completion bash).", nil},
	{"version", "", "Print the version, the module and the source revision of this build.", nil},
	{"help", "[command]", "Print this overview, or one command's usage and flags.", nil},
}

func lookupCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// flagSet is a new flag set for command name whose errors and help the
// caller prints (parseFlags).
func flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args with parse (fs.Parse when nil). -h, -help and
// --help print the command's usage on stdout and give exit code 0; a bad
// flag is reported with the usage on stderr and gives 2. ok is true when
// the command should go on.
func parseFlags(name string, fs *flag.FlagSet, args []string, parse func() error, stdout, stderr io.Writer) (code int, ok bool) {
	if parse == nil {
		parse = func() error { return fs.Parse(args) }
	}
	err := parse()
	switch {
	case errors.Is(err, flag.ErrHelp):
		printCommandUsage(stdout, name)
		return 0, false
	case err != nil:
		fmt.Fprintf(stderr, "simpler %s: %s\n", name, flagError(fs, err))
		printSynopsis(stderr, name)
		return 2, false
	}
	return 0, true
}

// flagErrorName finds the flag the flag package's errors name, which it
// spells with one dash ("flag provided but not defined: -platfrom",
// "invalid value \"x\" for flag -devices: ...").
var flagErrorName = regexp.MustCompile(`(not defined: |needs an argument: |for flag )-(-?[\w-]+)`)

// flagError rewords an error of the flag package the way simpler's own
// messages spell flags, with two dashes, and for an unknown flag names
// the closest one fs has.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	m := flagErrorName.FindStringSubmatchIndex(msg)
	if m == nil {
		return msg
	}
	given := strings.TrimPrefix(msg[m[4]:m[5]], "-")
	msg = msg[:m[4]] + "-" + given + msg[m[5]:]
	if !strings.HasPrefix(err.Error(), "flag provided but not defined") {
		return msg
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if near := closest(given, names); near != "" {
		msg += fmt.Sprintf(" (did you mean --%s?)", near)
	}
	return msg
}

// closest is the name among names nearest to word, if one is near
// enough to be a typo of it: at most a third of its letters edited
// (transposing two letters counts once), at least one allowed.
func closest(word string, names []string) string {
	best, bestDist := "", 0
	for _, n := range names {
		d := editDistance(strings.ToLower(word), strings.ToLower(n))
		if best == "" || d < bestDist {
			best, bestDist = n, d
		}
	}
	limit := max(1, len(word)/3)
	if best == "" || bestDist > limit {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and transpositions of adjacent
// letters each cost one.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// usageError reports a wrong use of command name that the flag package
// did not catch (a missing or extra argument): exit code 2.
func usageError(stderr io.Writer, name, format string, args ...any) int {
	fmt.Fprintf(stderr, "simpler %s: %s\n", name, fmt.Sprintf(format, args...))
	printSynopsis(stderr, name)
	return 2
}

// printSynopsis prints the command's usage line and where to read more.
func printSynopsis(w io.Writer, name string) {
	fmt.Fprintf(w, "usage: %s\nrun 'simpler help %s' for its flags\n", synopsis(name), name)
}

// synopsis is "simpler NAME [--flag V]... ARGS" for a public command.
func synopsis(name string) string {
	c, _ := lookupCommand(name)
	parts := []string{"simpler", name}
	if c.flags != nil {
		fs := flagSet(name)
		c.flags(fs)
		fs.VisitAll(func(f *flag.Flag) {
			meta, _ := flag.UnquoteUsage(f)
			item := "--" + f.Name
			if meta != "" {
				item += " " + meta
			}
			item = "[" + item + "]"
			if _, many := f.Value.(*pathList); many {
				item += "..."
			}
			parts = append(parts, item)
		})
	}
	if c.args != "" {
		parts = append(parts, c.args)
	}
	return strings.Join(parts, " ")
}

// printCommandUsage prints one command's help: its synopsis, what it
// does, and each flag with its default.
func printCommandUsage(w io.Writer, name string) {
	c, _ := lookupCommand(name)
	fmt.Fprintf(w, "usage: %s\n\n%s\n", synopsis(name), wrap(c.summary, 76, ""))
	if c.flags == nil {
		return
	}
	fs := flagSet(name)
	c.flags(fs)
	fmt.Fprintln(w, "\nflags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// usage prints the overview: every command's synopsis and summary.
func usage(w io.Writer) {
	fmt.Fprintln(w, "simpler runs Starlark orchestration scripts over simulated (or real) Ascend NPU chips.")
	fmt.Fprintln(w, "\nusage: simpler <command> [flags] [arguments]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %s\n%s\n", synopsis(c.name), wrap(c.summary, 72, "      "))
	}
	fmt.Fprintln(w, "\n'simpler help COMMAND' (or 'simpler COMMAND --help') prints a command's flags with their defaults.")
}

// cmdHelp prints the overview, or one command's usage.
func cmdHelp(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		usage(stdout)
		return 0
	case len(args) > 1:
		return usageError(stderr, "help", "one command at most, got %q", args)
	}
	if _, ok := lookupCommand(args[0]); !ok {
		fmt.Fprintf(stderr, "simpler help: unknown command %q (commands: %s)\n", args[0], strings.Join(commandNames(), ", "))
		return 2
	}
	printCommandUsage(stdout, args[0])
	return 0
}

func commandNames() []string {
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	return names
}

// noArgs is the check of a command that takes no arguments: its help, or
// a usage error for anything else.
func noArgs(name string, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	fs := flagSet(name)
	if code, ok := parseFlags(name, fs, args, nil, stdout, stderr); !ok {
		return code, false
	}
	if fs.NArg() > 0 {
		return usageError(stderr, name, "takes no arguments, got %q", fs.Args()), false
	}
	return 0, true
}

// cmdVersion prints the release, then the module and source revision the
// Go toolchain recorded in the binary.
func cmdVersion(args []string, stdout, stderr io.Writer) int {
	if code, ok := noArgs("version", args, stdout, stderr); !ok {
		return code
	}
	fmt.Fprintf(stdout, "simpler %s\n", Version)
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return 0
	}
	fmt.Fprintf(stdout, "module:   %s %s\n", info.Main.Path, info.Main.Version)
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		if settings["vcs.modified"] == "true" {
			rev += " (modified)"
		}
		if at := settings["vcs.time"]; at != "" {
			rev += ", committed " + at
		}
		fmt.Fprintf(stdout, "revision: %s\n", rev)
	} else {
		fmt.Fprintln(stdout, "revision: unknown (built outside a git checkout, or with -buildvcs=false)")
	}
	fmt.Fprintf(stdout, "go:       %s\n", info.GoVersion)
	return 0
}

// wrap breaks text into lines of at most width runes, each after indent.
func wrap(text string, width int, indent string) string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, indent+line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		lines = append(lines, indent+line)
	}
	return strings.Join(lines, "\n")
}
