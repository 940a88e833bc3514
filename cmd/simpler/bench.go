package main

import (
	"fmt"
	"io"
	"strings"

	"simpler/bench"
)

// cmdBench runs the benchmarks and prints each figure beside its limit.
// It exits 1 when a target is missed, so a regression is visible.
func cmdBench(args []string, stdout, stderr io.Writer) int {
	all := []string{"dispatch", "process", "collectives", "remote", "global"}
	parts := map[string]func(io.Writer) (bool, error){
		"dispatch":    func(w io.Writer) (bool, error) { return bench.Dispatch(w, "thread") },
		"process":     func(w io.Writer) (bool, error) { return bench.Process(w, launcher()) },
		"collectives": bench.Collectives,
		"remote":      bench.Remote,
		"global":      bench.Global,
	}
	if len(args) == 0 {
		args = all
	}
	for _, a := range args {
		if parts[a] == nil {
			fmt.Fprintf(stderr, "usage: simpler bench [%s]...\n", strings.Join(all, "|"))
			return 2
		}
	}
	ok := true
	for _, a := range args {
		met, err := parts[a](stdout)
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
