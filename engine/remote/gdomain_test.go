package remote

import (
	"strings"
	"testing"

	"simpler/engine"
	"simpler/engine/global"
	"simpler/internal/enginetest"
	"simpler/internal/fault"
)

// Global domains over a local level-3 node and a remote one.

// nodeGlobals counts the global domains w's local nodes hold.
func nodeGlobals(w *engine.Worker) int {
	n := 0
	for _, c := range w.Children() {
		if c != nil { // a remote node
			n += global.Hosted(c)
		}
	}
	return n
}

// mixedNodes makes a level-4 worker over a local level-3 node (node 0) and
// a remote one (node 1, served by a daemon with env), one chip each. The
// caller closes it.
func mixedNodes(t *testing.T, env ...string) *engine.Worker {
	t.Helper()
	_, addr := startDaemon(t, env...)
	w, err := newParent(engine.Config{Level: 4, Platform: sim(t)})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := engine.NewWorker(engine.Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0}})
	w.AddWorker(c)
	w.AddRemoteWorker(engine.RemoteSpec{Endpoint: addr, Platform: "a2a3sim", DeviceIDs: []int{0}})
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	return w
}

// engine's TestGlobalDomainRollbackMatrix with a remote node: the daemon
// fails the phase on itself (SIMPLER_INJECT_FAULT in its environment, a bare point), the
// local node is aborted too, and the next allocation on the same session
// works.
func TestGlobalDomainRemoteRollback(t *testing.T) {
	for _, phase := range []string{"comm_init", "prepare", "import", "commit"} {
		w := mixedNodes(t, fault.Env+"=global."+phase)
		spec := global.Spec{Name: "g", Members: [][2]int{{0, 0}, {1, 0}}, WindowSize: 256}
		err := submitRun(t, w, func(o *engine.Orchestrator) error { _, err := global.Allocate(o, spec); return err })
		if err == nil || !strings.Contains(err.Error(), "injected fault at global."+phase) || !strings.Contains(err.Error(), "on node 1") {
			t.Errorf("%s: got %v", phase, err)
		}
		if n := nodeGlobals(w); n != 0 {
			t.Errorf("%s: the local node kept %d domains after the abort", phase, n)
		}
		var d *global.Domain
		mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
			d = enginetest.Must(global.Allocate(o, spec))
			// Staging reaches the remote member's window (STAGE_TO/FROM).
			enginetest.Must(0, d.CopyToGlobal(1, []byte("remote"), "", 100))
			if got := enginetest.Must(d.CopyFromGlobal(1, 6, "", 100)); string(got) != "remote" {
				t.Errorf("%s: staged back %q from the remote rank", phase, got)
			}
			if _, err := d.CopyFromGlobal(1, 8, "", 250); err == nil || !strings.Contains(err.Error(), "overrun the 256-byte window") {
				t.Errorf("%s: remote overrun: %v", phase, err)
			}
		}))
		if !d.Freed() {
			t.Errorf("%s: the retry was not freed at its fence", phase)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// engine's TestGlobalDomainAbortFailurePoisons against a real daemon that
// fails its own IMPORT and then its ABORT: the primary error names the import, the worker refuses work
// naming the abort, and close still ends the session cleanly (the session
// frees what the failed abort left when its connection closes).
func TestGlobalDomainRemoteAbortFailurePoisons(t *testing.T) {
	w := mixedNodes(t, fault.Env+"=global.import,global.abort")
	spec := global.Spec{Name: "g", Members: [][2]int{{0, 0}, {1, 0}}, WindowSize: 256}
	err := submitRun(t, w, func(o *engine.Orchestrator) error { _, err := global.Allocate(o, spec); return err })
	if err == nil || !strings.Contains(err.Error(), "IMPORT on node 1") || !strings.Contains(err.Error(), "injected fault at global.import") {
		t.Fatalf("primary error: %v", err)
	}
	if n := nodeGlobals(w); n != 0 {
		t.Errorf("the local node kept %d domains: its ABORT went through", n)
	}
	_, err = w.Submit(asBuild(func(o *engine.Orchestrator) error { return nil }))
	if err == nil || !strings.Contains(err.Error(), "unusable") || !strings.Contains(err.Error(), "injected fault at global.abort") {
		t.Fatalf("a poisoned worker accepted work: %v", err)
	}
	if err := w.Close(); err != nil && !strings.Contains(err.Error(), "unusable") {
		t.Errorf("close: %v", err)
	}
}
