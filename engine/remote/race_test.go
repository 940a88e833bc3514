package remote

import (
	"strings"
	"testing"

	"simpler/engine"
	"simpler/hal/dtype"
	"simpler/internal/enginetest"
	"simpler/internal/race"
)

// The --race kernels: racewrite records its write of tensor 0 with the
// detector (a Go kernel has no Starlark builtin to do it), then writes.
// node_racewrites submits it twice on the node's chip 0 as two
// OUTPUT_EXISTING writers, which upstream's tag rules do not order (a
// race); node_orderedwrites makes the second INOUT, ordered after the
// first (no race).
func init() {
	procKernels["racewrite"] = func(a *engine.TaskArgs, c *engine.ChipCtx, stop *engine.Stopper) error {
		b := taskBytes(a, c, 0)
		if c.Race != nil {
			c.Race.Access(race.Addr(b), len(b), race.Write, "racewrite", nil)
		}
		b[0]++
		return nil
	}
	procKernels["racewrites"], procKernels["orderedwrites"] = procKernels["noop"], procKernels["noop"] // so that the session resolves their node_ names
	nodeOrchRuns["node_racewrites"] = func(o *engine.Orchestrator, a *engine.TaskArgs) error {
		return twoWrites(o, a, engine.OutputExisting)
	}
	nodeOrchRuns["node_orderedwrites"] = func(o *engine.Orchestrator, a *engine.TaskArgs) error {
		return twoWrites(o, a, engine.InOut)
	}
}

// twoWrites submits racewrite on the node's tensor 0 twice, the second
// time with tag second.
func twoWrites(o *engine.Orchestrator, a *engine.TaskArgs, second engine.Tag) error {
	h, ok := o.Worker().Registry().Lookup(procKernel{"racewrite"}.Digest())
	if !ok {
		return engine.Errorf(engine.ValueError, "racewrite not registered on the node")
	}
	for _, tag := range []engine.Tag{engine.OutputExisting, second} {
		if _, err := o.SubmitNext(h, mkArgs(a.Tensors[0], tag), nil, 0); err != nil {
			return err
		}
	}
	return nil
}

// raceRun runs node orchestration name on node 0 of a level-4 worker over
// a daemon at addr, on a remote buffer, twice (the count must not grow
// with a pair already reported), and returns node 0's race count.
func raceRun(t *testing.T, addr, name string) *race.NodeCount {
	t.Helper()
	w := remoteWorker(t, addr)
	register(t, w, procKernel{"racewrite"})
	orch := register(t, w, nodeOrch{procKernel{name}})
	h := enginetest.Must(outside(w).Malloc(0, 8))
	ref := remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: dtype.Int64}, Ref: engine.RemoteRef{Buf: h}}
	for range 2 {
		mustRun(t, w, func(o *engine.Orchestrator) error {
			_, err := o.SubmitNext(orch, mkArgs(ref, engine.InOut), nil, 0)
			return err
		})
	}
	if err := Free(h); err != nil {
		t.Fatal(err)
	}
	return nodeOf(w, 0).RaceCount()
}

// A session started with --race checks the node's kernels: two unordered
// writers of a remote buffer are reported once, on the session's stderr
// forwarded to the parent as whole lines in order, and every COMPLETION
// carries the count, which the parent keeps (RaceCount, RemoteRaces). A
// race-free program on the same daemon reports nothing and counts 0; a
// daemon without --race says it does not check.
func TestRaceCountReachesTheParent(t *testing.T) {
	errs := &syncBuffer{}
	SetForwardedOutput(&syncBuffer{}, errs, true)
	defer SetForwardedOutput(osStdout, osStderr, true)
	_, checked := startDaemon(t, sessionRaceEnv+"=1")

	got := raceRun(t, checked, "node_racewrites")
	if got == nil || !got.Checked || got.Races != 1 || got.Node != "node 0" {
		t.Fatalf("racy node's count: %+v, want node 0 checked with 1 race", got)
	}
	if !slicesContain(RemoteRaces(), *got) {
		t.Errorf("RemoteRaces %+v lacks %+v", RemoteRaces(), *got)
	}
	report := errs.String()
	if errs.notLines != 0 {
		t.Errorf("%d writes of the report were not one whole line", errs.notLines)
	}
	if strings.Count(report, "WARNING: DATA RACE") != 1 {
		t.Fatalf("want one report on the parent's stderr, got:\n%s", report)
	}
	// Each line is whole, tagged with the node, and the block is in order.
	var block []string
	for _, line := range strings.Split(strings.TrimSuffix(report, "\n"), "\n") {
		body, ok := strings.CutPrefix(line, "[node 0] ")
		if !ok {
			t.Fatalf("line %q is not tagged [node 0]", line)
		}
		block = append(block, body)
	}
	want := []string{"==================", "WARNING: DATA RACE", "Write of bytes [0, 8) of remote buffer", "", "Previous write of bytes [0, 8) of remote buffer", "", "Unordered: no task dependency", "=================="}
	at := 0
	for _, line := range block {
		if at < len(want) && strings.HasPrefix(line, want[at]) && (want[at] != "" || line == "") {
			at++
		}
	}
	if at != len(want) {
		t.Errorf("report lines out of order or missing (matched %d of %q):\n%s", at, want, report)
	}

	errs = &syncBuffer{}
	SetForwardedOutput(&syncBuffer{}, errs, true)
	clean := raceRun(t, checked, "node_orderedwrites")
	if clean == nil || !clean.Checked || clean.Races != 0 || errs.String() != "" {
		t.Errorf("race-free node: %+v, stderr %q", clean, errs.String())
	}

	_, unchecked := startDaemon(t)
	if n := raceRun(t, unchecked, "node_racewrites"); n == nil || n.Checked || n.Races != 0 {
		t.Errorf("node of a daemon without --race: %+v, want not checked", n)
	}
	if errs.String() != "" {
		t.Errorf("a node without a detector reported: %q", errs.String())
	}
}

func slicesContain(all []race.NodeCount, n race.NodeCount) bool {
	for _, x := range all {
		if x == n {
			return true
		}
	}
	return false
}
