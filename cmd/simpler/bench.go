package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"simpler/bench"
)

// benchPart is one benchmark: it prints its figures and says whether they
// met their targets.
type benchPart struct {
	name string
	run  func(io.Writer) (bool, error)
}

// benchParts are the benchmarks `simpler bench` can run, in the order it
// runs them.
var benchParts = []benchPart{
	{"dispatch", func(w io.Writer) (bool, error) { return bench.Dispatch(w, "thread") }},
	{"process", func(w io.Writer) (bool, error) { return bench.Process(w, launcher()) }},
	{"collectives", func(w io.Writer) (bool, error) { return bench.Collectives(w, launcher()) }},
	{"remote", bench.Remote},
	{"global", bench.Global},
	{"pod", bench.Pod},
	{"group", bench.Group},
	{"race", benchRace}, // bench_race.go: what --race costs on the examples and golden scripts
}

func benchNames() []string {
	var names []string
	for _, p := range benchParts {
		names = append(names, p.name)
	}
	return names
}

// cmdBench runs the benchmarks and prints each figure beside its limit.
// A missed target is printed (by its part, and in a last line naming the
// parts); the exit code reports only failures to run: on a shared machine
// a figure is a measurement, not a test.
func cmdBench(args []string, stdout, stderr io.Writer) int {
	fs := flagSet("bench")
	if code, ok := parseFlags("bench", fs, args, nil, stdout, stderr); !ok {
		return code
	}
	names := fs.Args()
	if len(names) == 0 {
		names = benchNames()
	}
	var runs []func(io.Writer) (bool, error)
	for _, name := range names {
		i := slices.IndexFunc(benchParts, func(p benchPart) bool { return p.name == name })
		if i < 0 {
			return usageError(stderr, "bench", "no benchmark %q", name)
		}
		runs = append(runs, benchParts[i].run)
	}
	var missed []string
	for i, run := range runs {
		met, err := run(stdout)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		if !met {
			missed = append(missed, names[i])
		}
	}
	bench.Summary(stdout) // issue 28's table: the figures a script gets, met or MISSED
	if len(missed) > 0 {
		fmt.Fprintf(stdout, "bench: targets MISSED in %s (printed above)\n", strings.Join(missed, ", "))
	}
	return 0
}
