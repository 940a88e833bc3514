package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"simpler/golden"
	"simpler/internal/dsched"
)

// `simpler test --explore N [--seed S0]` (docs/explore.md): every script
// runs under the deterministic scheduler with seeds S0, S0+1, ...,
// S0+N-1, and its outcome is compared with its golden file as usual. The
// first seed at which a script differs stops the search: its diff, and
// the one command that replays it, are printed. A script the scheduler
// cannot order (remote nodes, process mode) is named once and left out.

// exploreOptions are test's flags for it, as given.
type exploreOptions struct {
	explore, seed string
	n             int
	seed0         uint64
}

func (o *exploreOptions) parse() error {
	if o.explore == "" {
		if o.seed != "" {
			return fmt.Errorf("--seed %s: simpler test takes a seed only with --explore N", o.seed)
		}
		return nil
	}
	var err error
	if o.n, err = dsched.ParsePositive("--explore", o.explore); err != nil {
		return err
	}
	if o.seed != "" {
		o.seed0, err = dsched.ParseSeed(o.seed)
	}
	return err
}

// unschedulable is what a script's output says when --seed refuses it.
const unschedulable = "--seed schedules"

// explore runs every script once per seed, thread mode, until one fails.
func explore(o *exploreOptions, suite *golden.Suite, scripts, base []string, stdout io.Writer, paint painter) int {
	suite.Modes, suite.FailFast = nil, false // an unschedulable script fails, and is no reason to stop
	left := map[string]bool{}
	for i := 0; i < o.n; i++ {
		seed := o.seed0 + uint64(i)
		suite.Runner.Args = append(append([]string(nil), base...), "--seed", strconv.FormatUint(seed, 10))
		var bad *golden.Outcome
		suite.Run(suite.Jobs(scripts), func(out golden.Outcome) {
			if out.Passed || out.NotRun || bad != nil {
				return
			}
			if strings.Contains(out.Diff+out.Got+out.Problem, unschedulable) {
				left[out.Script] = true
				return
			}
			bad = &out
		})
		if bad != nil {
			fmt.Fprintf(stdout, "seed %d: %s differs from its golden file after %d seed(s) of every script passed\n", seed, bad.Script, i)
			reportOutcome(stdout, paint, *bad, false, false)
			fmt.Fprintf(stdout, "replay it with: simpler run --seed %d %s\n", seed, bad.Script)
			return 1
		}
		scripts = slices.DeleteFunc(scripts, func(s string) bool { return left[s] })
	}
	for _, s := range slices.Sorted(maps.Keys(left)) {
		fmt.Fprintf(stdout, "left out (the scheduler cannot order it): %s\n", s)
	}
	fmt.Fprintf(stdout, "%d seed(s) from %d: %d script(s) matched their golden files at every seed\n", o.n, o.seed0, len(scripts))
	return 0
}
