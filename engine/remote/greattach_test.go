package remote

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"simpler/engine"
	"simpler/engine/global"
	"simpler/internal/enginetest"
	"simpler/internal/fault"
)

// A domain over a local and a remote node, allocated again over the same
// members and window size, comes up in one REATTACH phase (the daemon
// takes its pooled window back and keeps its mapping of the local node's),
// the remote window zeroed. A daemon whose REATTACH fails (a bare fault
// point: once) is aborted with the local node, and the full transaction
// brings the domain up.
func TestGlobalDomainRemoteWarm(t *testing.T) {
	w := mixedNodes(t, fault.Env+"=global.reattach")
	var mu sync.Mutex
	var steps []string
	w.Events().Observe(func(e engine.Event) {
		if e.Kind == engine.GlobalStep && !strings.HasPrefix(e.Callable, "STAGE_") {
			mu.Lock()
			steps = append(steps, e.Callable)
			mu.Unlock()
		}
	})
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		s := steps
		steps = nil
		slices.Sort(s)
		return s
	}
	spec := global.Spec{Name: "g", Members: [][2]int{{0, 0}, {1, 0}}, WindowSize: 256}
	round := func(want string) *global.Domain {
		var d *global.Domain
		mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
			d = enginetest.Must(global.Allocate(o, spec))
			if got := enginetest.Must(d.CopyFromGlobal(1, 6, "", 100)); string(got) != "\x00\x00\x00\x00\x00\x00" {
				t.Errorf("the remote window reads %q, want zeroes", got)
			}
			enginetest.Must(0, d.CopyToGlobal(1, []byte("remote"), "", 100))
		}))
		if !d.Freed() || nodeGlobals(w) != 0 {
			t.Errorf("freed %v, %d local node domains left", d.Freed(), nodeGlobals(w))
		}
		if got := strings.Join(take(), " "); got != want {
			t.Errorf("commands %q, want %q", got, want)
		}
		return d
	}
	round("COMMIT COMMIT COMM_INIT COMM_INIT IMPORT_TABLE IMPORT_TABLE PREPARE PREPARE RELEASE_DOMAIN RELEASE_DOMAIN")
	// The daemon fails its first REATTACH: aborted, then the full way.
	if d := round("ABORT ABORT COMMIT COMMIT COMM_INIT COMM_INIT IMPORT_TABLE IMPORT_TABLE PREPARE PREPARE REATTACH REATTACH RELEASE_DOMAIN RELEASE_DOMAIN"); d.Generation() != 2 {
		t.Errorf("the fallback ran under generation %d, want 2", d.Generation())
	}
	for i := 0; i < 3; i++ {
		round("REATTACH REATTACH RELEASE_DOMAIN RELEASE_DOMAIN")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
