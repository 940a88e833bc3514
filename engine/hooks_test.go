package engine

import (
	"errors"
	"strings"
	"testing"

	"simpler/wire"
)

// TestFenceHooksRunInPhaseOrderOnce checks that roles' fence work runs
// after the fence in phase order, once per key, that its error becomes the
// run's, and that a run past its fence refuses new hooks.
func TestFenceHooksRunInPhaseOrderOnce(t *testing.T) {
	w := newWorker(t, Config{})
	var got []string
	var run *Run
	r, err := w.Submit(func(o *Orchestrator) (any, error) {
		run = o.Run()
		add := func(p FencePhase, key, name string, err error) {
			if !run.OnFence(p, key, func() error { got = append(got, name); return err }) {
				t.Errorf("OnFence %s refused before the fence", name)
			}
		}
		add(FenceLocal, "d", "local", nil)
		add(FenceGlobal, "g", "global", errors.New("global failed"))
		add(FenceRemote, "r", "remote", nil)
		add(FenceRemote, "r", "remote again", nil) // same key: ignored
		run.AddCleanup(Cleanup{Name: "cleanup", Fn: func() error { got = append(got, "cleanup"); return nil }})
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Wait(0)
	if err == nil || err.Error() != "global failed" {
		t.Fatalf("wait: got %v, want the global hook's error", err)
	}
	if want := "remote cleanup global local"; strings.Join(got, " ") != want {
		t.Fatalf("fence work ran as %q, want %q", strings.Join(got, " "), want)
	}
	if run.OnFence(FenceRemote, "late", func() error { return nil }) {
		t.Fatal("a run past its fence took a hook")
	}
}

// TestCloseHooksRunOnceInOrder checks close's hooks: phase order, one per
// key, the first error close's.
func TestCloseHooksRunOnceInOrder(t *testing.T) {
	w, err := NewWorker(Config{Level: 3, DeviceIDs: []int{0}, Platform: sim(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	var got []string
	w.OnClose(CloseBeforeTeardown, "b", func() error { got = append(got, "before teardown"); return errors.New("b failed") })
	w.OnClose(CloseAfterDrain, "a", func() error { got = append(got, "after drain"); return nil })
	w.OnClose(CloseAfterDrain, "a", func() error { got = append(got, "twice"); return nil })
	if err := w.Close(); err == nil || err.Error() != "b failed" {
		t.Fatalf("close: got %v, want the hook's error", err)
	}
	if want := "after drain,before teardown"; strings.Join(got, ",") != want {
		t.Fatalf("close hooks ran as %q, want %q", strings.Join(got, ","), want)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// TestRoleIsMadeOnce checks that a role's state is made on first use and
// shared after.
func TestRoleIsMadeOnce(t *testing.T) {
	w := newWorker(t, Config{})
	type key struct{}
	made := 0
	mk := func() any { made++; return &made }
	a, b := w.Role(key{}, mk), w.Role(key{}, mk)
	if a != b || made != 1 {
		t.Fatalf("Role made its state %d times", made)
	}
}

// TestCommandWithoutRole checks that a command no role serves is a
// RuntimeError naming it.
func TestCommandWithoutRole(t *testing.T) {
	w := newWorker(t, Config{})
	err := w.Command(wire.Control{Cmd: wire.CmdMalloc}, &wire.ControlReply{})
	wantKind(t, "unserved command", err, RuntimeError)
	if !strings.Contains(err.Error(), "REMOTE_MALLOC") {
		t.Fatalf("error %q does not name the command", err)
	}
}
