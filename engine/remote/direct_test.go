package remote

import (
	"strings"
	"sync"
	"testing"
	"time"

	"simpler/engine"
	"simpler/internal/enginetest"
	"simpler/wire"
)

// Against a real daemon, while a run's task spins on a remote node: every
// remote_* call outside a run is refused naming the one run in flight, and
// sends nothing (no buffer is made); the deferred releases of handles the
// task uses stay legal and free only after the run.
func TestRemoteDirectControlDuringARun(t *testing.T) {
	_, addr := startDaemon(t)
	w, err := newParent(engine.Config{Level: 4, Platform: sim(t), SessionTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	enginetest.Must(w.AddRemoteWorker(engine.RemoteSpec{Endpoint: addr, Platform: "a2a3sim", DeviceIDs: []int{0}}))
	register(t, w, nodeOrch{procKernel{"node_spin"}})
	register(t, w, procKernel{"spin"})
	if err := w.Init(); err != nil {
		w.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	spin := kernelNode(t, w, "node_spin")
	mark := enginetest.Must(outside(w).Malloc(0, 8))
	owner := enginetest.Must(outside(w).Malloc(0, 8))
	view := enginetest.Must(outside(w).Import(enginetest.Must(outside(w).Export(owner, 0, 8, engine.AccessRW)), 0, 0))
	exp := enginetest.Must(outside(w).Export(owner, 0, 8, engine.AccessRead))
	r := enginetest.Must(w.Submit(asBuild(func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(spin, mkArgs(remoteRef(mark), engine.OutputExisting, remoteRef(view), engine.Input), nil, 0)
		return err
	})))
	poll(t, "the kernel to start on the node", func() bool { return readRemote(t, w, mark) == 1 })

	// Record the buffer commands the refusals would send: none may be.
	// (A health probe may be sent meanwhile, from another goroutine.)
	var mu sync.Mutex
	var sent []wire.Command
	nodeOf(w, 0).setTamper(func(c *wire.Control) *wire.Control {
		switch c.Cmd {
		case wire.CmdMalloc, wire.CmdCopyTo, wire.CmdCopyFrom, wire.CmdExport, wire.CmdImport:
			mu.Lock()
			sent = append(sent, c.Cmd)
			mu.Unlock()
		}
		return nil
	})
	b := make([]byte, 8)
	refusals := map[string]error{
		"remote_copy_from": outside(w).CopyFrom(mark, b, 0),
		"remote_copy_to":   outside(w).CopyTo(mark, b, 0),
	}
	_, refusals["remote_malloc"] = outside(w).Malloc(0, 8)
	_, refusals["remote_export"] = outside(w).Export(owner, 0, 8, engine.AccessRead)
	_, refusals["remote_import"] = outside(w).Import(exp, 0, 0)
	for op, err := range refusals {
		if err == nil || !strings.Contains(err.Error(), op+": 1 run(s) still in flight") {
			t.Errorf("%s during a run: %v", op, err)
			continue
		}
		if engine.KindOf(err) != engine.RuntimeError {
			t.Errorf("%s during a run: kind %v, want RuntimeError", op, engine.KindOf(err))
		}
	}
	nodeOf(w, 0).setTamper(nil)
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 0 {
		t.Errorf("the refused calls sent %v to the node", sent)
	}

	// The task uses view (and so owner): both releases are deferred.
	if err := ReleaseImport(view); err != nil || !view.Released() || Freed(view) {
		t.Fatalf("deferred release of an import in use: %v (released %v, freed %v)", err, view.Released(), Freed(view))
	}
	if err := Free(owner); err != nil || !owner.Released() || Freed(owner) {
		t.Fatalf("deferred free of an owner in use: %v (released %v, freed %v)", err, owner.Released(), Freed(owner))
	}
	r.Cancel()
	if err := r.Wait(10 * time.Second); err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("the cancelled run: %v", err)
	}
	if !Freed(view) || !Freed(owner) {
		t.Errorf("after the run: import freed %v, owner freed %v; want both", Freed(view), Freed(owner))
	}
	if err := Free(mark); err != nil {
		t.Fatal(err)
	}
}
