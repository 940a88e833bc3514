package main

import (
	"fmt"
	"io"
	"slices"

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
	{"collectives", bench.Collectives},
	{"remote", bench.Remote},
	{"global", bench.Global},
	{"pod", bench.Pod},
}

func benchNames() []string {
	var names []string
	for _, p := range benchParts {
		names = append(names, p.name)
	}
	return names
}

// cmdBench runs the benchmarks and prints each figure beside its limit.
// It exits 1 when a target is missed, so a regression is visible.
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
	ok := true
	for _, run := range runs {
		met, err := run(stdout)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		ok = ok && met
	}
	if !ok {
		return 1
	}
	return 0
}
