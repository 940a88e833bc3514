package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"simpler/golden"
	"simpler/internal/mpitest"
)

// checkedTrace is a trace that checkTrace read, indexed for tests.
type checkedTrace struct {
	jsonTrace
	lanes  map[[2]int]string // (pid, tid) → thread name
	slices []tracedSlice     // every "X" event
	flows  int               // matched flows
}

// tracedSlice is an "X" event, in nanoseconds.
type tracedSlice struct {
	name, cat, lane string
	pid, tid        int
	start, end      int64
}

// ns is a trace timestamp (microseconds) in whole nanoseconds, which is
// what viewers turn it into.
func ns(us float64) int64 { return int64(math.Round(us * 1e3)) }

// checkTrace reads a trace and checks what the Trace Event Format asks of
// it and what viewers rely on: every thread that has slices is named, and
// uniquely within its process; a slice's duration is not negative; the
// slices of one thread nest (two are disjoint or one holds the other,
// else Perfetto misdraws or drops them); every flow id has one start
// ("s") and one end ("f", bound to its enclosing slice), the start not
// after the end, each inside a slice of its own thread. It returns the
// trace and every problem found.
func checkTrace(raw []byte) (*checkedTrace, []string) {
	tr := &checkedTrace{lanes: map[[2]int]string{}}
	if err := json.Unmarshal(raw, &tr.jsonTrace); err != nil {
		return nil, []string{fmt.Sprintf("not JSON: %v", err)}
	}
	var problems []string
	named := map[int]map[string]bool{} // pid → its thread names
	for _, e := range tr.TraceEvents {
		if e.Ph == "M" && e.Name == "thread_name" {
			name, _ := e.Args["name"].(string)
			if named[e.Pid] == nil {
				named[e.Pid] = map[string]bool{}
			}
			if named[e.Pid][name] {
				problems = append(problems, fmt.Sprintf("process %d: two threads named %q", e.Pid, name))
			}
			named[e.Pid][name] = true
			tr.lanes[[2]int{e.Pid, e.Tid}] = name
		}
	}
	for _, e := range tr.TraceEvents {
		if e.Ph != "X" {
			continue
		}
		lane, ok := tr.lanes[[2]int{e.Pid, e.Tid}]
		if !ok {
			problems = append(problems, fmt.Sprintf("slice %q on unnamed thread %d/%d", e.Name, e.Pid, e.Tid))
		}
		if e.Dur < 0 {
			problems = append(problems, fmt.Sprintf("slice %q on %s has duration %v", e.Name, lane, e.Dur))
		}
		tr.slices = append(tr.slices, tracedSlice{e.Name, e.Cat, lane, e.Pid, e.Tid, ns(e.Ts), ns(e.Ts + e.Dur)})
	}
	problems = append(problems, checkNesting(tr.slices)...)
	var flowProblems []string
	tr.flows, flowProblems = checkFlows(tr)
	return tr, append(problems, flowProblems...)
}

// checkNesting reports the slices that partly overlap another on their
// thread. In order of start (the longer first when two start together),
// a stack holds the slices that contain the current one.
func checkNesting(all []tracedSlice) []string {
	byThread := map[[2]int][]tracedSlice{}
	for _, s := range all {
		k := [2]int{s.pid, s.tid}
		byThread[k] = append(byThread[k], s)
	}
	var problems []string
	for _, ss := range byThread {
		sort.Slice(ss, func(i, j int) bool {
			if ss[i].start != ss[j].start {
				return ss[i].start < ss[j].start
			}
			return ss[i].end > ss[j].end
		})
		var open []tracedSlice
		for _, s := range ss {
			for len(open) > 0 && open[len(open)-1].end <= s.start {
				open = open[:len(open)-1]
			}
			if n := len(open); n > 0 && s.end > open[n-1].end {
				o := open[n-1]
				problems = append(problems, fmt.Sprintf("on %s, %q [%d, %d] partly overlaps %q [%d, %d] (ns)", s.lane, s.name, s.start, s.end, o.name, o.start, o.end))
			}
			open = append(open, s)
		}
	}
	sort.Strings(problems)
	return problems
}

// checkFlows checks every flow's two ends and returns how many flows
// there are.
func checkFlows(tr *checkedTrace) (int, []string) {
	type end struct {
		ph, bp   string
		pid, tid int
		ts       int64
	}
	ends := map[int][]end{}
	var ids []int
	for _, e := range tr.TraceEvents {
		if e.Ph == "s" || e.Ph == "f" || e.Ph == "t" {
			if ends[e.ID] == nil {
				ids = append(ids, e.ID)
			}
			ends[e.ID] = append(ends[e.ID], end{e.Ph, e.Bp, e.Pid, e.Tid, ns(e.Ts)})
		}
	}
	within := func(x end) bool {
		return slices.ContainsFunc(tr.slices, func(s tracedSlice) bool {
			return s.pid == x.pid && s.tid == x.tid && s.start <= x.ts && x.ts <= s.end
		})
	}
	var problems []string
	for _, id := range ids {
		e := ends[id]
		switch {
		case len(e) != 2 || e[0].ph != "s" || e[1].ph != "f":
			problems = append(problems, fmt.Sprintf("flow %d is not one start and one end: %v", id, e))
		case e[1].bp != "e":
			problems = append(problems, fmt.Sprintf("flow %d: its end is not bound to the enclosing slice (bp %q)", id, e[1].bp))
		case e[0].ts > e[1].ts:
			problems = append(problems, fmt.Sprintf("flow %d ends (%d ns) before it starts (%d ns)", id, e[1].ts, e[0].ts))
		case !within(e[0]) || !within(e[1]):
			problems = append(problems, fmt.Sprintf("flow %d: an end is outside every slice of its thread: %v", id, e))
		}
	}
	return len(ids), problems
}

// The validator finds what it is for: slices that partly overlap on one
// thread, and flows that are not matched or not bound to slices.
func TestCheckTraceCatchesProblems(t *testing.T) {
	bad := `{"traceEvents": [
		{"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "lane"}},
		{"name": "a", "ph": "X", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
		{"name": "b", "ph": "X", "ts": 2, "dur": 3, "pid": 1, "tid": 1},
		{"name": "c", "ph": "X", "ts": 8, "dur": 5, "pid": 1, "tid": 1},
		{"name": "d", "ph": "X", "ts": 20, "dur": 1, "pid": 1, "tid": 2},
		{"name": "x", "ph": "s", "id": 1, "ts": 1, "pid": 1, "tid": 1},
		{"name": "y", "ph": "s", "id": 2, "ts": 1, "pid": 1, "tid": 1},
		{"name": "y", "ph": "f", "bp": "e", "id": 2, "ts": 15, "pid": 1, "tid": 1}
	]}`
	_, problems := checkTrace([]byte(bad))
	want := []string{`"c" [8000, 13000] partly overlaps "a" [0, 10000]`, `slice "d" on unnamed thread 1/2`,
		"flow 1 is not one start and one end", "flow 2: an end is outside every slice"}
	for _, w := range want {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, w) }) {
			t.Errorf("no problem %q reported; got %q", w, problems)
		}
	}
	if len(problems) != len(want) {
		t.Errorf("want %d problems, got %q", len(want), problems)
	}
}

// untasked are the examples that run no task: their traces have no task
// slice.
var untasked = map[string]bool{
	"remote_buffer_roundtrip": true, // remote buffers only
}

// Every example, run as `simpler test` runs it (its # simpler-args and the
// daemons its # simpler-daemons line asks for) but with --trace, in
// thread and in process mode, still matches its golden file and writes a
// trace that checkTrace accepts, with a process per Worker and, but for
// those in untasked, a task slice.
func TestExampleTraces(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	scripts, err := golden.Find([]string{"../../scripts/examples"})
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, mode := range []string{"thread", "process"} {
		for _, script := range scripts {
			name := strings.TrimSuffix(filepath.Base(script), ".star")
			t.Run(mode+"/"+name, func(t *testing.T) {
				t.Parallel()
				if !mpitest.Script(t, script) { // mpirun_group.star without mpirun: fails under CI, said loudly elsewhere
					return
				}
				checkExampleTrace(t, bin, script, mode, untasked[name])
			})
		}
	}
}

// checkExampleTrace runs one example in mode with --trace, as TestExampleTraces says.
func checkExampleTrace(t *testing.T, bin, script, mode string, untasked bool) {
	tracePath := filepath.Join(t.TempDir(), "trace.json")
	r := golden.Runner{Binary: bin, Env: append([]string{asCLI + "=1"}, mpitest.Env()...),
		Args: append(slices.Clone(golden.DefaultArgs), "--mode", mode, "--trace", tracePath)}
	o := r.Check(script, false)
	if !o.Passed {
		t.Fatalf("%s with --trace: %s\n%s", script, o.Problem, o.Diff)
	}
	tr := readTrace(t, tracePath)
	if !slices.ContainsFunc(tr.TraceEvents, func(e traceJSONEvent) bool { return e.Name == "process_name" }) {
		t.Errorf("the trace has no Worker")
	}
	hasTask := slices.ContainsFunc(tr.slices, func(s tracedSlice) bool { return s.cat == "task" })
	if hasTask == untasked {
		t.Errorf("task slices: %v; the example is listed as running no task: %v", hasTask, untasked)
	}
}
