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
	ok, err := bench.Dispatch(stdout, "thread")
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	okProc, err := bench.Process(stdout, launcher())
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	ok = ok && okProc
	okColl, err := bench.Collectives(stdout)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	ok = ok && okColl
	if !ok {
		return 1
	}
	return 0
}
