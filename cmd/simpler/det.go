package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"simpler/engine"
	"simpler/internal/dsched"
	"simpler/kind"
	"simpler/starlib"
)

// The deterministic scheduler's flags of `simpler run` (docs/explore.md):
// --seed S runs the script under a schedule seed S decides; --explore N
// runs it N times with seeds S, S+1, ... and stops at the first that
// fails; --check-replay runs seed S twice and compares the two schedules.

// detOptions are the flags, as given (validated by parse).
type detOptions struct {
	seed, explore, pctDepth string
	strategy                string
	checkReplay             bool

	seedN     uint64
	exploreN  int
	depth     int
	scheduled bool     // --seed, --explore or --check-replay was given
	decisions []string // the schedule's, when scheduleEnv asks for them
}

func (o *detOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.seed, "seed", "", "run under the deterministic scheduler with seed `S` (thread mode): the same seed replays the same interleaving and output")
	fs.StringVar(&o.explore, "explore", "", "run the script `N` times with seeds S, S+1, ... (S from --seed, else 0) and stop at the first whose exit status is not 0, printing the command that replays it")
	fs.StringVar(&o.strategy, "strategy", "pct", "how the scheduler picks at each point (`NAME`): pct (probabilistic concurrency testing) or random")
	fs.StringVar(&o.pctDepth, "pct-depth", "3", "PCT's depth `d`: the number of ordering constraints a bug it looks for needs")
	fs.BoolVar(&o.checkReplay, "check-replay", false, "run --seed S twice and check both made the same schedule and output")
}

// parse validates the flags; a bad value is a usage error naming its flag.
func (o *detOptions) parse(mode string) error {
	o.scheduled = o.seed != "" || o.explore != "" || o.checkReplay
	if !o.scheduled {
		return nil
	}
	var err error
	if o.seed != "" {
		if o.seedN, err = dsched.ParseSeed(o.seed); err != nil {
			return err
		}
	}
	if o.explore != "" {
		if o.exploreN, err = dsched.ParsePositive("--explore", o.explore); err != nil {
			return err
		}
	}
	if o.depth, err = dsched.ParsePositive("--pct-depth", o.pctDepth); err != nil {
		return err
	}
	if o.strategy != "pct" && o.strategy != "random" {
		return kind.Errorf(kind.ValueError, "--strategy %q: want pct or random", o.strategy)
	}
	if mode != "thread" {
		return kind.Errorf(kind.ValueError, "--seed schedules thread mode only (--mode %s runs kernels in processes the schedule cannot order)", mode)
	}
	return nil
}

// attach gives a session its schedule, for a run with seed.
func (o *detOptions) attach(s *starlib.Session, seed uint64, stderr io.Writer) error {
	if !o.scheduled {
		return nil
	}
	var trace func(dsched.Decision)
	if os.Getenv(scheduleEnv) != "" {
		trace = func(d dsched.Decision) {
			o.decisions = append(o.decisions, fmt.Sprintf("%d %s: %s -> %s", d.Step, d.Point, d.FromName, d.ToName))
		}
	}
	return s.Schedule(starlib.Schedule{Seed: seed, Strategy: o.strategy, Depth: o.depth, Trace: trace})
}

// childArgs are the flags of the command line a child run repeats: every
// one given but the scheduler's own.
func childArgs(given map[string]string) []string {
	var args []string
	for _, name := range slices.Sorted(maps.Keys(given)) {
		switch name {
		case "seed", "explore", "check-replay", "strategy", "pct-depth":
			continue
		}
		args = append(args, "--"+name+"="+given[name])
	}
	return args
}

// runChildren is --explore and --check-replay: each run of the script is
// a `simpler run --seed S` of its own (a process gives each seed a clean
// world), with args the command line's other flags.
func (o *detOptions) runChildren(script string, args []string, stdout, stderr io.Writer) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if o.checkReplay {
		return o.checkOneReplay(exe, script, args, stdout, stderr)
	}
	for i := 0; i < o.exploreN; i++ {
		seed := o.seedN + uint64(i)
		out, errOut, code := runSeed(exe, script, args, seed, o)
		if code != 0 {
			fmt.Fprintf(stderr, "simpler run --explore: seed %d failed (exit status %d) after %d passing seed(s)\n", seed, code, i)
			fmt.Fprintf(stderr, "-- stdout --\n%s-- stderr --\n%s", out, errOut)
			fmt.Fprintf(stderr, "replay it with: simpler run %s\n", replayCommand(seed, o, args, script))
			return 1
		}
	}
	fmt.Fprintf(stdout, "simpler run --explore: %d seed(s) from %d passed\n", o.exploreN, o.seedN)
	return 0
}

// checkOneReplay runs seed twice and compares the schedules' hashes and
// the outputs; on a difference it names the first step that differs.
func (o *detOptions) checkOneReplay(exe, script string, args []string, stdout, stderr io.Writer) int {
	type result struct {
		out, errOut string
		code        int
		sched       string
	}
	var rs [2]result
	for i := range rs {
		f, err := os.CreateTemp("", "simpler-schedule-*")
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		f.Close()
		rs[i].out, rs[i].errOut, rs[i].code = runSeedEnv(exe, script, args, o.seedN, o, scheduleEnv+"="+f.Name())
		b, _ := os.ReadFile(f.Name())
		os.Remove(f.Name())
		rs[i].sched = string(b)
	}
	a, b := rs[0], rs[1]
	if a.out == b.out && a.errOut == b.errOut && a.code == b.code && a.sched == b.sched {
		io.WriteString(stdout, a.out)
		io.WriteString(stderr, a.errOut)
		fmt.Fprintf(stderr, "simpler run --check-replay: seed %d replayed exactly (%s)\n", o.seedN, firstLine(a.sched))
		return a.code
	}
	fmt.Fprintf(stderr, "simpler run --check-replay: seed %d did not replay: %s\n", o.seedN, divergence(a.sched, b.sched, a.out != b.out || a.errOut != b.errOut))
	return 1
}

// scheduleEnv names the file a scheduled run writes its schedule to (its
// hash and steps, then one decision per line), for --check-replay.
const scheduleEnv = "SIMPLER_SCHEDULE_OUT"

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// divergence says where two schedules' decision lists first differ.
func divergence(a, b string, outputs bool) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(la) && i < len(lb); i++ {
		if la[i] != lb[i] {
			return fmt.Sprintf("the schedules differ at line %d: %q, then %q (something the scheduler does not order, such as the wall clock or a thread of the script's own, decided that step)", i+1, la[i], lb[i])
		}
	}
	if len(la) != len(lb) {
		return fmt.Sprintf("one schedule has %d decisions, the other %d", len(la)-1, len(lb)-1)
	}
	if outputs {
		return "the schedules agree but the outputs differ (the script printed something that does not come from the schedule)"
	}
	return "the exit statuses differ"
}

func runSeed(exe, script string, args []string, seed uint64, o *detOptions) (string, string, int) {
	return runSeedEnv(exe, script, args, seed, o, "")
}

func runSeedEnv(exe, script string, args []string, seed uint64, o *detOptions, env string) (string, string, int) {
	argv := append([]string{"run", "--seed", strconv.FormatUint(seed, 10), "--strategy", o.strategy, "--pct-depth", strconv.Itoa(o.depth)}, args...)
	cmd := exec.CommandContext(context.Background(), exe, append(argv, script)...)
	if env != "" {
		cmd.Env = append(os.Environ(), env)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if err != nil {
		code = 1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return out.String(), errOut.String(), code
}

func replayCommand(seed uint64, o *detOptions, args []string, script string) string {
	parts := []string{"--seed", strconv.FormatUint(seed, 10)}
	if o.strategy != "pct" {
		parts = append(parts, "--strategy", o.strategy)
	}
	if o.depth != 3 {
		parts = append(parts, "--pct-depth", strconv.Itoa(o.depth))
	}
	return strings.Join(append(append(parts, args...), script), " ")
}

// writeSchedule writes the finished schedule's hash, steps and decisions
// where --check-replay asked.
func writeSchedule(det *engine.Det, decisions []string) {
	path := os.Getenv(scheduleEnv)
	if det == nil || path == "" {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "schedule %016x, %d steps\n", det.S.Hash(), det.S.Steps())
	for _, d := range decisions {
		b.WriteString(d)
		b.WriteByte('\n')
	}
	os.WriteFile(path, []byte(b.String()), 0o600)
}
