package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The --race suite: every program under tests/race is one case, labelled
// in its first line (`# race: racy`, `# race: race-free`, `# race:
// deadlock`, or a combination), and raceCases says what --race must print
// for it. TestRaceSuite runs each through this binary as `simpler run
// --race` and checks the exit status, every report block and the summary;
// TestRaceSuiteWithoutRace runs each without --race and checks that
// nothing of it is printed. docs/race.md describes the suite.

// raceCase is what one program of tests/race must give under --race.
type raceCase struct {
	name  string   // tests/race/NAME.star
	label string   // what its `# race:` line says
	modes []string // the --mode values it runs in

	exit     int        // exit status under --race
	races    []raceWant // one per WARNING: DATA RACE block, in any order
	uninit   []string   // the location of each WARNING: UNINITIALIZED READ block
	repeated string     // a "happened N times" line of the summary, if any
	deadlock []string   // what the DEADLOCK block must say, if there is one
	stderr   []string   // more that stderr must hold (the script's own error)

	plainExit int // exit status without --race; -1: not run (a deadlock waits out its timeout_s)
}

// raceWant is one expected race report: the code locations of its two
// accesses (either may be the later one) and its "Unordered:" line, which
// must hold one of why.
type raceWant struct {
	a, b string
	why  []string
}

// Fragments of the "Unordered:" lines, one per way a pair is unordered.
const (
	whyGroup          = "of one group task start together, and no comm.barrier() or notify/wait orders these accesses."
	whyInsertOnlyRule = "an OUTPUT or OUTPUT_EXISTING (insert-only) does not wait for an earlier writer of its bytes under upstream's tag rules"
	whyInsertOnly     = "no task dependency: an OUTPUT or OUTPUT_EXISTING (insert-only) does not wait for an earlier writer of its bytes under upstream's tag rules; and no barrier or notify/wait between the two."
	whyWAR            = "no task dependency: a writer (OUTPUT, OUTPUT_EXISTING or INOUT) does not wait for an earlier reader of its bytes under upstream's tag rules; and no barrier or notify/wait between the two."
	whyWAROrdered     = "no task dependency: a writer (OUTPUT, OUTPUT_EXISTING or INOUT) does not wait for an earlier reader of its bytes under upstream's tag rules (order_hazards=True orders them here; upstream would race); and no barrier or notify/wait between the two."
	whyNoTag          = "no task dependency orders task 2 after task 1 (no tensor tag links them), and no barrier or notify/wait between the two."
	whyMainNoWait     = "the orchestration did not wait for task 1 of run 1 (wait(), drain() or the run's end) before this access."
	whyMainSubmits    = "the orchestration's access came after it submitted task 1 of run 1, and nothing orders the task after it."
)

// Every case runs in both modes, but for what process mode checks
// differently (docs/race.md): a deadlock between kernels in chip
// processes ends at the waits' timeouts, not at once, and a race between
// the kernels of two level-3 node processes is in no one detector's view.
var (
	thread = []string{"thread"}
	both   = []string{"thread", "process"}
)

var raceCases = []raceCase{
	{name: "peer_store_no_barrier", label: "racy", modes: both, exit: 66,
		races: []raceWant{{"peer_store_no_barrier.star:11:30", "peer_store_no_barrier.star:13:36", []string{whyGroup}}}},
	{name: "peer_store_barrier", label: "race-free", modes: both},
	{name: "notify_wait_handoff", label: "race-free", modes: both},
	{name: "notify_wait_one_word_off", label: "racy", modes: both, exit: 66,
		races: []raceWant{{"notify_wait_one_word_off.star:15:59", "notify_wait_one_word_off.star:18:36", []string{whyGroup}}}},
	{name: "output_existing_two_writers", label: "racy", modes: both, exit: 66,
		races: []raceWant{{"output_existing_two_writers.star:9:24", "output_existing_two_writers.star:9:24", []string{whyInsertOnly}}}},
	{name: "war_no_dependency", label: "racy", modes: both, exit: 66,
		races: []raceWant{{"war_no_dependency.star:10:45", "war_no_dependency.star:13:24", []string{whyWAR}}}},
	// The same pair with the writer's store first in time: the note is
	// found whichever task came first.
	{name: "war_writer_first", label: "racy", modes: both, exit: 66,
		races: []raceWant{{"war_writer_first.star:15:45", "war_writer_first.star:18:24", []string{whyWAR}}}},
	{name: "war_order_hazards", label: "racy", modes: both, exit: 66,
		races: []raceWant{{"war_order_hazards.star:9:45", "war_order_hazards.star:12:24", []string{whyWAROrdered}}}},
	// Which access comes first in time depends on how soon the task starts:
	// either way the pair is one report, with the line for its order.
	{name: "readback_before_wait", label: "racy", modes: both, exit: 66,
		races: []raceWant{{"readback_before_wait.star:7:24", "readback_before_wait.star:15:19", []string{whyMainSubmits, whyMainNoWait}}}},
	{name: "orch_write_after_submit", label: "racy", modes: both, exit: 66,
		races: []raceWant{{"orch_write_after_submit.star:10:45", "orch_write_after_submit.star:29:12", []string{whyMainSubmits, whyMainNoWait}}}},
	{name: "signal_reuse_no_reset", label: "racy", modes: both, exit: 66,
		races: []raceWant{{"signal_reuse_no_reset.star:25:34", "signal_reuse_no_reset.star:35:40", []string{whyGroup}}}},
	{name: "window_after_release", label: "racy", modes: both, exit: 66,
		races: []raceWant{{"window_after_release.star:14:49", "window_after_release.star:17:24", []string{whyWAR}}}},
	{name: "window_after_release_ok", label: "race-free", modes: both},
	{name: "atomics_add", label: "race-free", modes: both},
	{name: "atomics_vs_plain", label: "racy", modes: both, exit: 66,
		races: []raceWant{{"atomics_vs_plain.star:9:19", "atomics_vs_plain.star:11:20", []string{whyGroup}}}},
	{name: "uninit_alloc", label: "racy (uninitialized read)", modes: both, exit: 66,
		uninit: []string{"uninit_alloc.star:10:45", "uninit_alloc.star:13:45"}},
	{name: "atomic_flag_both_sides", label: "race-free", modes: both},
	{name: "atomic_flag_one_side", label: "racy", modes: both, exit: 66,
		races: []raceWant{{"atomic_flag_one_side.star:14:24", "atomic_flag_one_side.star:10:21", []string{whyNoTag}}}},
	{name: "strided_disjoint_columns", label: "race-free", modes: both},
	{name: "strided_overlap_columns", label: "racy", modes: both, exit: 66,
		races:    []raceWant{{"strided_overlap_columns.star:8:24", "strided_overlap_columns.star:11:24", []string{whyInsertOnly}}},
		repeated: "simpler: the race between strided_overlap_columns.star:11:24 and strided_overlap_columns.star:8:24 happened 4 times"},
	{name: "loop_races_1000_times", label: "racy", modes: both, exit: 66,
		races:    []raceWant{{"loop_races_1000_times.star:7:24", "loop_races_1000_times.star:12:15", []string{whyNoTag}}},
		repeated: "simpler: the race between loop_races_1000_times.star:12:15 and loop_races_1000_times.star:7:24 happened 1000 times"},
	{name: "sub_vs_chip_writers", label: "racy", modes: both, exit: 66,
		races: []raceWant{{"sub_vs_chip_writers.star:8:24", "sub_vs_chip_writers.star:16:24", []string{whyInsertOnly}}}},
	// The Unordered line names the level-4 tag rule that left the two
	// node tasks unordered.
	{name: "nested_l4_writers", label: "racy", modes: thread, exit: 66,
		races: []raceWant{{"nested_l4_writers.star:9:24", "nested_l4_writers.star:9:24", []string{whyInsertOnlyRule}}}},
	// Every report says what memory it is: device memory from o.malloc too.
	{name: "device_memory_unordered", label: "racy", modes: both, exit: 66,
		races: []raceWant{{"device_memory_unordered.star:10:24", "device_memory_unordered.star:13:45", []string{whyNoTag}}}},
	// A passed barrier with a remote member is not a deadlock: the
	// detector asks the barrier itself.
	{name: "global_barrier_remote", label: "race-free", modes: thread},
	{name: "runs_ordered", label: "race-free", modes: both},
	{name: "atomics_add_handoff", label: "race-free", modes: both},
	{name: "deadlock_barrier_skipped", label: "deadlock", modes: thread, exit: 1, plainExit: -1,
		deadlock: []string{
			"kernel (task 1, member 0, run 1, on chip_worker 0 (device 0)), rank 0 of domain \"pair\"\n" +
				"  waits in comm.barrier() #1 of domain \"pair\" (2 ranks); not arrived: rank(s) 1\n" +
				"  kernel()\n      deadlock_barrier_skipped.star:10:21\n",
		}},
	{name: "deadlock_ring_wrong_rank", label: "deadlock", modes: thread, exit: 1, plainExit: -1,
		deadlock: []string{
			"rank 0 of domain \"ring\"\n  waits in comm.wait() on bytes [0, 4) of buffer \"token\" of domain \"ring\", rank 0 until it is >= 1; it holds 0, no notify wrote it\n  kernel()\n      deadlock_ring_wrong_rank.star:17:18\n",
			"rank 1 of domain \"ring\"\n  waits in comm.wait() on bytes [0, 4) of buffer \"token\" of domain \"ring\", rank 1 until it is >= 2; it holds 1, last notified to 1 by kernel (task 1, member 2, run 1, on chip_worker 2 (device 2)), rank 2 of domain \"ring\"\n",
			"rank 2 of domain \"ring\"\n  waits in comm.wait() on bytes [0, 4) of buffer \"token\" of domain \"ring\", rank 2 until it is >= 2; it holds 1, last notified to 1 by kernel (task 1, member 1, run 1, on chip_worker 1 (device 1)), rank 1 of domain \"ring\"\n",
		}},
	{name: "deadlock_same_chip", label: "deadlock", modes: thread, exit: 1, plainExit: -1,
		deadlock: []string{
			"waiter (task 1, member 0, run 1, on chip_worker 0 (device 0)), rank 0 of domain \"pair\"\n" +
				"  waits in comm.wait() on bytes [0, 4) of buffer \"ready\" of domain \"pair\", rank 0 until it is >= 1; it holds 0, no notify wrote it\n" +
				"  waiter()\n      deadlock_same_chip.star:9:14\n",
		}},
	{name: "racy_and_deadlock", label: "racy, deadlock", modes: thread, exit: 1, plainExit: -1,
		races: []raceWant{{"racy_and_deadlock.star:13:30", "racy_and_deadlock.star:15:36", []string{whyGroup}}},
		deadlock: []string{
			"rank 0 of domain \"pair\"\n  waits in comm.barrier() #1 of domain \"pair\" (2 ranks); not arrived: rank(s) 1\n  kernel()\n      racy_and_deadlock.star:16:21\n",
		}},
	{name: "racy_then_fails", label: "racy, fails", modes: both, exit: 1, plainExit: 1,
		races:  []raceWant{{"racy_then_fails.star:7:24", "racy_then_fails.star:7:24", []string{whyInsertOnly}}},
		stderr: []string{"racy_then_fails.star:20:9: in main\n", "\nRuntimeError: the script's own failure\n"}},
}

// raceDir is where the suite's programs are, from this package's
// directory.
var raceDir = filepath.Join("..", "..", "tests", "race")

// Every program of tests/race has a case, and its label is the case's.
func TestRaceSuiteLabels(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(raceDir, "*.star"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no programs in %s: %v", raceDir, err)
	}
	byName := map[string]raceCase{}
	for _, c := range raceCases {
		byName[c.name] = c
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".star")
		c, ok := byName[name]
		if !ok {
			t.Errorf("%s has no case in raceCases", f)
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(src), "\n")
		if want := "# race: " + c.label; first != want {
			t.Errorf("%s: first line %q, want %q", f, first, want)
		}
		delete(byName, name)
	}
	for name := range byName {
		t.Errorf("case %s has no program %s.star", name, name)
	}
}

func TestRaceSuite(t *testing.T) {
	for _, c := range raceCases {
		for _, mode := range c.modes {
			t.Run(c.name+"/"+mode, func(t *testing.T) {
				start := time.Now()
				code, stdout, stderr := runChild(t, raceDir, "run", "--race", "--mode", mode, c.name+".star")
				took := time.Since(start)
				if code != c.exit {
					t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.exit, stdout, stderr)
				}
				for _, msg := range checkRaceOutput(c, stderr) {
					t.Error(msg)
				}
				if c.deadlock != nil && took > 10*time.Second {
					t.Errorf("the deadlock took %v to report; its waits' timeout_s is 30, the report must come at once", took)
				}
				if t.Failed() {
					t.Logf("stderr:\n%s", stderr)
				}
			})
		}
	}
}

// Without --race nothing of the detector is printed, and a program exits
// as its script does. The deadlocks are not run: without the detector
// they wait out their 30-second timeout_s.
func TestRaceSuiteWithoutRace(t *testing.T) {
	for _, c := range raceCases {
		if c.plainExit < 0 {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runChild(t, raceDir, "run", c.name+".star")
			if code != c.plainExit {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.plainExit, stdout, stderr)
			}
			for _, s := range []string{"WARNING: DATA RACE", "UNINITIALIZED READ", "DEADLOCK", "data race(s)", "happened"} {
				if strings.Contains(stderr, s) {
					t.Errorf("stderr holds %q without --race:\n%s", s, stderr)
				}
			}
			if c.plainExit == 0 && stderr != "" {
				t.Errorf("stderr without --race:\n%s", stderr)
			}
		})
	}
}

// checkRaceOutput is what stderr of c's run under --race gets wrong.
func checkRaceOutput(c raceCase, stderr string) []string {
	if c.races == nil && c.uninit == nil && c.deadlock == nil && c.stderr == nil {
		if stderr != "" {
			return []string{"a race-free program printed on stderr"}
		}
		return nil
	}
	var bad []string
	blocks := reportBlocks(stderr)
	bad = append(bad, checkRaceBlocks(c, blocks["WARNING: DATA RACE"])...)
	bad = append(bad, checkUninitBlocks(c, blocks["WARNING: UNINITIALIZED READ"])...)
	bad = append(bad, checkDeadlockBlocks(c, blocks["DEADLOCK"], stderr)...)
	if sum := raceSummaryLine(len(c.races), len(c.uninit)); sum != "" && !strings.Contains(stderr, "\n"+sum+"\n") {
		bad = append(bad, fmt.Sprintf("no summary line %q", sum))
	} else if sum == "" && strings.Contains(stderr, "data race(s)") {
		bad = append(bad, "a summary line, with nothing found")
	}
	if c.repeated != "" && !strings.Contains(stderr, "\n"+c.repeated+"\n") {
		bad = append(bad, fmt.Sprintf("no line %q", c.repeated))
	}
	if c.repeated == "" && strings.Contains(stderr, "happened") {
		bad = append(bad, "a \"happened N times\" line, with no repeat expected")
	}
	if strings.Contains(stderr, "of memory no one named") {
		bad = append(bad, "a report does not say what memory it is (\"of memory no one named\")")
	}
	for _, s := range c.stderr {
		if !strings.Contains(stderr, s) {
			bad = append(bad, fmt.Sprintf("stderr does not hold %q", s))
		}
	}
	return bad
}

// raceSummaryLine is the last line --race prints for races and uninit
// uninitialised reads, "" when there are none.
func raceSummaryLine(races, uninit int) string {
	if races+uninit == 0 {
		return ""
	}
	s := fmt.Sprintf("simpler: found %d data race(s)", races)
	if uninit > 0 {
		s += fmt.Sprintf(" and %d uninitialized read(s)", uninit)
	}
	return s
}

// reportBlocks splits stderr's report blocks (between lines of '='), by
// their first line's kind.
func reportBlocks(stderr string) map[string][]string {
	const rule = "==================\n"
	out := map[string][]string{}
	rest := stderr
	for {
		i := strings.Index(rest, rule)
		if i < 0 {
			return out
		}
		rest = rest[i+len(rule):]
		j := strings.Index(rest, rule)
		if j < 0 {
			return out
		}
		block := rest[:j]
		rest = rest[j+len(rule):]
		first, _, _ := strings.Cut(block, "\n")
		kind, _, _ := strings.Cut(first, ":")
		if strings.HasPrefix(first, "WARNING: ") {
			kind = first
		}
		out[kind] = append(out[kind], block)
	}
}

// checkRaceBlocks matches each expected race with a block of its own.
func checkRaceBlocks(c raceCase, blocks []string) []string {
	var bad []string
	if len(blocks) != len(c.races) {
		bad = append(bad, fmt.Sprintf("%d WARNING: DATA RACE blocks, want %d", len(blocks), len(c.races)))
	}
	left := slices.Clone(blocks)
	for _, w := range c.races {
		i := slices.IndexFunc(left, func(b string) bool { return raceBlockMatches(b, w) })
		if i < 0 {
			bad = append(bad, fmt.Sprintf("no race report between %s and %s with an Unordered line holding one of %q", w.a, w.b, w.why))
			continue
		}
		left = slices.Delete(left, i, i+1)
	}
	return bad
}

// raceBlockMatches reports whether block is the race w: one access at
// w.a and the other at w.b (in either order), and its last line, the
// Unordered one, holding one of w.why.
func raceBlockMatches(block string, w raceWant) bool {
	later, earlier, ok := strings.Cut(block, "\nPrevious ")
	if !ok {
		return false
	}
	at := func(s, loc string) bool { return strings.Contains(s, "      "+loc+"\n") }
	if !(at(later, w.a) && at(earlier, w.b) || at(later, w.b) && at(earlier, w.a)) {
		return false
	}
	lines := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "Unordered: ") {
		return false
	}
	return slices.ContainsFunc(w.why, func(why string) bool { return strings.Contains(last, why) })
}

func checkUninitBlocks(c raceCase, blocks []string) []string {
	var bad []string
	if len(blocks) != len(c.uninit) {
		bad = append(bad, fmt.Sprintf("%d WARNING: UNINITIALIZED READ blocks, want %d", len(blocks), len(c.uninit)))
	}
	for _, loc := range c.uninit {
		if !slices.ContainsFunc(blocks, func(b string) bool {
			return strings.Contains(b, "      "+loc+"\n") && strings.Contains(b, "of run-heap block at ")
		}) {
			bad = append(bad, fmt.Sprintf("no uninitialized read report of a run-heap block at %s", loc))
		}
	}
	return bad
}

// checkDeadlockBlocks checks the one DEADLOCK block, when c expects one,
// and that the run failed with the deadlock's RuntimeError.
func checkDeadlockBlocks(c raceCase, blocks []string, stderr string) []string {
	if c.deadlock == nil {
		if len(blocks) != 0 {
			return []string{"a DEADLOCK block, with no deadlock expected"}
		}
		return nil
	}
	if len(blocks) != 1 {
		return []string{fmt.Sprintf("%d DEADLOCK blocks, want 1", len(blocks))}
	}
	var bad []string
	for _, s := range c.deadlock {
		if !strings.Contains(blocks[0], s) {
			bad = append(bad, fmt.Sprintf("the DEADLOCK block does not hold %q", s))
		}
	}
	if n := strings.Count(blocks[0], "\n  waits in "); n != len(c.deadlock) {
		bad = append(bad, fmt.Sprintf("the DEADLOCK block names %d waits, want %d", n, len(c.deadlock)))
	}
	if !strings.Contains(stderr, "\nRuntimeError: ") || !strings.Contains(stderr, "deadlock: rank ") {
		bad = append(bad, "the run did not fail with the deadlock's RuntimeError")
	}
	return bad
}

// Every example and golden script is race-free: `simpler test --race`
// passes on them (a report would change a script's stderr and exit
// status, and fail it against its golden file).
func TestRaceExamplesAndGoldenAreRaceFree(t *testing.T) {
	code, stdout, stderr := runChild(t, filepath.Join("..", ".."), "test", "--race", "scripts/examples", "tests/golden")
	if code != 0 {
		t.Errorf("simpler test --race: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// simpler bench race's measurement, on two small scripts and two rounds:
// a line per script with both medians and ratios, the two verdicts, and
// the worst script. A script that fails on purpose is measured too.
func TestBenchRaceMeasures(t *testing.T) {
	t.Setenv(asCLI, "1") // the children are this binary as the CLI
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"quiet.star": "def main(ctx):\n    print(\"hi\")\n",
		"fails.star": "def main(ctx):\n    fail(\"on purpose\")\n",
	})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if _, err := measureRace(&out, exe, []string{dir}, 2); err != nil {
		t.Fatalf("measureRace: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"race: simpler run with and without --race, thread mode, 2 scripts of [" + dir + "], 2 rounds interleaved\n",
		filepath.Join(dir, "fails.star"), filepath.Join(dir, "quiet.star"),
		"median time ratio (--race / without)", "median peak RSS ratio (--race / without)", "(target <= 3.00)", "(target <= 2.00)",
		"worst script",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the output lacks %q:\n%s", want, got)
		}
	}
	if _, err := measureRace(&out, exe, []string{filepath.Join(dir, "none")}, 1); err == nil {
		t.Error("measureRace of a directory without scripts: no error")
	}
}
