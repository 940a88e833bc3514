package engine

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"simpler/hal/shm"
	"simpler/internal/fault"
)

// Global domains over level-3 nodes whose chips are processes: every
// rank's window is prepared, imported, committed and released in its
// chip's process (opGlobalRank), whether the node itself runs in the
// broker's process or in one of its own.

// l4OverProcChips makes a level-4 worker (mode l4mode) over two level-3
// nodes with mode="process", two chips each; obs, if set, observes the
// level-4 worker. The caller's test closes it.
func l4OverProcChips(t *testing.T, l4mode string, obs Observer) *Worker {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	launcher := func() *Launcher { return &Launcher{Path: exe, Env: []string{childEnv + "=1"}} }
	cfg := Config{Level: 4, Platform: sim(t), Mode: l4mode}
	if l4mode == "process" {
		cfg.Launcher = launcher()
	}
	w, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.Observe(obs)
	for n := 0; n < 2; n++ {
		c, err := NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{2 * n, 2*n + 1}, Mode: "process", Launcher: launcher()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.AddWorker(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return w
}

// gdomNames lists the windows and headers of global domains that exist
// under this process's prefix and its node processes' (where the chips
// of a process-mode node put them).
func gdomNames(t *testing.T, w *Worker) []string {
	t.Helper()
	prefixes := []string{shm.Prefix()}
	for _, p := range w.nodeProcs {
		prefixes = append(prefixes, fmt.Sprintf("simpler-%d-", p.cur.Load().cmd.Process.Pid))
	}
	var out []string
	for _, prefix := range prefixes {
		names, err := shm.Leftovers(prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if strings.Contains(n, "-gdom-") {
				out = append(out, n)
			}
		}
	}
	return out
}

// The whole life of a domain over process-mode chips, with the node in
// the broker's process and in a process of its own: the windows exist
// while it lives (one per rank, and a header), staging in and out reaches
// them (a 2 MiB copy too, more than one mailbox message), and nothing is
// left after the fence.
func TestGlobalDomainOverProcessChips(t *testing.T) {
	for _, l4mode := range []string{"thread", "process"} {
		t.Run("l4="+l4mode, func(t *testing.T) {
			w := l4OverProcChips(t, l4mode, nil)
			big := bytes.Repeat([]byte("0123456789abcdef"), 1<<17)
			var d *GlobalDomain
			mustRun(t, w, buildErr(func(o *Orchestrator) {
				spec := fourRanks(false)
				spec.WindowSize = 4 << 20
				d = must(o.AllocateGlobalDomain(spec))
				if n := len(gdomNames(t, w)); n != 5 {
					t.Errorf("%d window and header objects for four ranks, want 5", n)
				}
				must(0, d.CopyToGlobal(3, []byte("hello"), "out", 10))
				if got := must(d.CopyFromGlobal(3, 5, "out", 10)); string(got) != "hello" {
					t.Errorf("staged back %q", got)
				}
				must(0, d.CopyToGlobal(1, big, "", 2048))
				if got := must(d.CopyFromGlobal(1, len(big), "", 2048)); !bytes.Equal(got, big) {
					t.Error("a 2 MiB staging round trip came back changed")
				}
			}))
			if !d.Freed() {
				t.Fatal("not freed at the fence")
			}
			if left := gdomNames(t, w); len(left) != 0 {
				t.Fatalf("left after the fence: %v", left)
			}
		})
	}
}

// The staged bytes are in the chip's own memory, at the window base the
// node's view reports, in the chip's process: the chip reads them back
// from there (a copy_from in the child), and the CommContext the view
// reports is memory of that chip.
func TestGlobalDomainWindowLivesInTheChipProcess(t *testing.T) {
	w := l4OverProcChips(t, "thread", nil)
	sp := newSpace(t)
	_, host, err := sp.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		d := must(o.AllocateGlobalDomain(fourRanks(false)))
		must(0, d.CopyToGlobal(3, []byte("in chip 3 window"), "in", 0))
		node := w.children[1]
		view := must(node.GlobalView(d.ID()))
		chip := node.chips[1]
		if _, isProc := chip.(*procChip); !isProc {
			t.Fatalf("chip 1 of node 1 is a %T, not a process", chip)
		}
		must(0, chip.CopyOut(host, view[1].BufferPtrs["in"]))
		if string(host) != "in chip 3 window" {
			t.Errorf("the chip process sees %q at its window", host)
		}
		if _, err := chip.Bytes(view[1].DeviceCtx, 64); err != nil || view[1].DeviceCtx == 0 {
			t.Errorf("device ctx %#x is not memory of the chip: %v", view[1].DeviceCtx, err)
		}
	}))
}

// The rollback matrix over process-mode chips: a failure at each phase on
// each node leaves no window in any process, keeps the primary error, and
// the next allocation works; with the nodes in the broker's process and
// in processes of their own.
func TestGlobalDomainProcessChipsRollbackMatrix(t *testing.T) {
	t.Cleanup(func() { fault.Load("") })
	for _, l4mode := range []string{"thread", "process"} {
		t.Run("l4="+l4mode, func(t *testing.T) {
			w := l4OverProcChips(t, l4mode, nil)
			for _, phase := range []string{"comm_init", "prepare", "import", "commit"} {
				for node := 0; node < 2; node++ {
					point := fmt.Sprintf("global.%s@%d", phase, node)
					if err := fault.Load(point); err != nil {
						t.Fatal(err)
					}
					err := submitRun(t, w, func(o *Orchestrator) error {
						_, err := o.AllocateGlobalDomain(fourRanks(false))
						return err
					})
					if err == nil || !strings.Contains(err.Error(), "injected fault at "+point) {
						t.Errorf("%s: got %v", point, err)
					}
					if left := gdomNames(t, w); len(left) != 0 {
						t.Errorf("%s: left after the abort: %v", point, left)
					}
				}
			}
			fault.Load("")
			mustRun(t, w, func(o *Orchestrator) error {
				_, err := o.AllocateGlobalDomain(fourRanks(false))
				return err
			})
		})
	}
}

// An ABORT that fails on a node of process-mode chips poisons the broker
// and keeps the primary error, as over thread-mode chips.
func TestGlobalDomainProcessChipsAbortFailurePoisons(t *testing.T) {
	w := l4OverProcChips(t, "thread", nil)
	t.Cleanup(func() { fault.Load("") })
	fault.Load("global.commit@1,global.abort@0")
	err := submitRun(t, w, func(o *Orchestrator) error {
		_, err := o.AllocateGlobalDomain(fourRanks(false))
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "global.commit@1") {
		t.Fatalf("primary error: %v", err)
	}
	_, err = w.Submit(asBuild(func(o *Orchestrator) error { return nil }))
	if err == nil || !strings.Contains(err.Error(), "global.abort@0") {
		t.Fatalf("a poisoned worker accepted work: %v", err)
	}
	if n := len(gdomNames(t, w)); n == 0 {
		t.Error("the failed abort of node 0 released its windows anyway")
	}
	w.children[0].CloseGlobals() // what the failed abort left on node 0
	if left := gdomNames(t, w); len(left) != 0 {
		t.Errorf("left after releasing node 0: %v", left)
	}
}

// A chip process that dies in the middle of the transaction fails the
// next step that needs it (it does not hang), and the ABORT still
// releases everything: the dead process's windows by name, including
// rank 0's header when the dead chip hosted rank 0. One that dies after
// COMMIT is cleaned up the same way at the fence.
func TestGlobalDomainChipProcessDies(t *testing.T) {
	cases := []struct {
		name        string
		after       string // the command after which the chip dies, on node 1
		node, local int    // the chip that dies
		wantErr     string // "" for a domain that commits
	}{
		{"rank 3 after PREPARE", "PREPARE", 1, 1, "IMPORT on node 1"},
		{"rank 0 after PREPARE", "PREPARE", 0, 0, "IMPORT on node 0"},
		{"rank 2 after COMMIT", "COMMIT", 1, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var w *Worker
			var armed atomic.Bool
			armed.Store(true)
			w = l4OverProcChips(t, "thread", func(e Event) {
				if e.Kind == GlobalStep && e.Callable == c.after && e.Worker == "child_worker 1" && armed.CompareAndSwap(true, false) {
					p := w.children[c.node].chipProcs[c.local]
					p.kill()
					<-p.cur.Load().exited
				}
			})
			var d *GlobalDomain
			err := submitRun(t, w, func(o *Orchestrator) (err error) {
				d, err = o.AllocateGlobalDomain(fourRanks(false))
				return err
			})
			switch {
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), "child process")):
				t.Errorf("got %v, want an error with %q naming the child process", err, c.wantErr)
			case c.wantErr == "" && (err != nil || !d.Freed()):
				t.Errorf("a domain whose chip died after COMMIT: %v (freed %v)", err, d != nil && d.Freed())
			}
			if left := gdomNames(t, w); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
			// Not poisoned: a domain over the other node still works.
			other := 1 - c.node
			mustRun(t, w, func(o *Orchestrator) error {
				_, err := o.AllocateGlobalDomain(GlobalSpec{Name: "after", Members: [][2]int{{other, 0}, {other, 1}}, WindowSize: 64})
				return err
			})
		})
	}
}
