package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"simpler/golden"
)

// runTraced runs an example as simpler test does (its daemons from its
// # simpler-daemons line), in mode, with --trace, and reads the trace.
func runTraced(t *testing.T, script, mode string) *checkedTrace {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tracePath := filepath.Join(t.TempDir(), "trace.json")
	r := golden.Runner{Binary: bin, Env: []string{asCLI + "=1"}, Args: append(slices.Clone(golden.DefaultArgs), "--mode", mode, "--trace", tracePath)}
	if o := r.Check(script, false); !o.Passed {
		t.Fatalf("%s: %s\n%s", script, o.Problem, o.Diff)
	}
	return readTrace(t, tracePath) // which checks nesting
}

// A remote node's work shows in the trace: its orchestration and chip
// tasks on a process of their own (a lane for the orchestration, one per
// chip), each within the level-4 task that ran them; the remote_copy_* calls as slices on the node's copies lane (the
// trace of remote_buffer_roundtrip, which runs no task, is not empty).
func TestRunTraceRemoteWork(t *testing.T) {
	for _, mode := range []string{"thread", "process"} {
		tr := runTraced(t, "../../scripts/examples/remote_buffer_roundtrip.star", mode)
		copies := map[string]int{}
		for _, s := range tr.slices {
			if s.cat == "copy" && s.lane == "remote_worker 0: copies" {
				copies[s.name]++
			}
		}
		if copies["remote_copy_to"] == 0 || copies["remote_copy_from"] == 0 {
			t.Errorf("%s: remote_buffer_roundtrip's copy slices %v, want both kinds", mode, copies)
		}

		tr = runTraced(t, "../../scripts/examples/vector_add_mixed_l3.star", mode)
		procs := map[int]string{}
		for _, e := range tr.TraceEvents {
			if e.Ph == "M" && e.Name == "process_name" {
				procs[e.Pid], _ = e.Args["name"].(string)
			}
		}
		var nodeTasks []tracedSlice // node_add on the level-4 worker's lane of the remote node
		for _, s := range tr.slices {
			if s.lane == "remote_worker 1" && s.name == "node_add" {
				nodeTasks = append(nodeTasks, s)
			}
		}
		chips := map[string]int{}
		for _, s := range tr.slices {
			if s.cat != "remote task" {
				continue
			}
			if procs[s.pid] != "remote_worker 1 of Worker 1 (remote node)" || s.name != map[bool]string{true: "node_add", false: "add"}[s.lane == "orchestration"] {
				t.Errorf("%s: a remote task %q on process %q", mode, s.name, procs[s.pid])
			}
			chips[s.lane]++
			if !slices.ContainsFunc(nodeTasks, func(n tracedSlice) bool { return n.start <= s.start && s.end <= n.end }) {
				t.Errorf("%s: remote %s on %s [%d, %d] is outside the level-4 task that ran it %v", mode, s.name, s.lane, s.start, s.end, nodeTasks)
			}
		}
		if chips["chip_worker 0 (device 0)"] != 1 || chips["chip_worker 1 (device 1)"] != 1 || chips["orchestration"] != 1 {
			t.Errorf("%s: the remote node's tasks by lane %v, want one on each chip and its orchestration", mode, chips)
		}
	}
}
