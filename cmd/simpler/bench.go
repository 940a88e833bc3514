package main

import (
	"fmt"
	"io"

	"simpler/bench"
)

// cmdBench runs the benchmarks and prints each figure beside its limit.
// It exits 1 when a target is missed, so a regression is visible.
func cmdBench(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: simpler bench")
		return 2
	}
	parts := []func(io.Writer) (bool, error){
		func(w io.Writer) (bool, error) { return bench.Dispatch(w, "thread") },
		func(w io.Writer) (bool, error) { return bench.Process(w, launcher()) },
		bench.Collectives,
		bench.Remote,
	}
	ok := true
	for _, run := range parts {
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
