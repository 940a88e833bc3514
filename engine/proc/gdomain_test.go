package proc

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"simpler/engine"
	"simpler/engine/global"
	"simpler/hal/shm"
	"simpler/internal/enginetest"
	"simpler/internal/fault"
)

// Global domains over process-mode nodes (the transaction and staging
// through a node's mailbox), and over level-3 nodes whose chips are
// processes: every rank's window is prepared, imported, committed and
// released in its chip's process (opGlobalRank), whether the node itself
// runs in the broker's process or in one of its own. (The transaction
// over nodes in one process is engine's test.)

// tree is a level-4 worker over two level-3 nodes of two chips each, and
// the logs of the processes it started: nodes has the node processes
// (a process-mode level 4), chips[i] node i's chip processes when the
// node runs in this process and its chips are processes.
type tree struct {
	w     *engine.Worker
	nodes *spawnLog
	chips [2]*spawnLog
}

// newTree makes a tree of a level-4 worker of mode l4mode over level-3
// nodes of mode l3mode; obs, if set, observes the level-4 worker. It is
// closed when the test ends (a poisoned one may say so).
func newTree(t *testing.T, l4mode, l3mode string, obs engine.Observer) *tree {
	t.Helper()
	tr := &tree{nodes: &spawnLog{}}
	cfg := engine.Config{Level: 4, Mode: l4mode, Spawn: tr.nodes}
	processMode(&cfg)
	w, err := engine.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.Events().Observe(obs)
	for n := range 2 {
		tr.chips[n] = &spawnLog{}
		c := engine.Config{Level: 3, DeviceIDs: []int{2 * n, 2*n + 1}, Mode: l3mode, Spawn: tr.chips[n]}
		processMode(&c)
		if _, err := w.AddWorker(enginetest.Must(engine.NewWorker(c))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil && !strings.Contains(err.Error(), "unusable") {
			t.Errorf("close: %v", err)
		}
	})
	tr.w = w
	return tr
}

// l4OverProcChips is a tree over nodes with mode="process", the level-4
// worker of mode l4mode.
func l4OverProcChips(t *testing.T, l4mode string, obs engine.Observer) *tree {
	return newTree(t, l4mode, "process", obs)
}

func fourRanks(retain bool) global.Spec {
	return global.Spec{Name: "g", Members: [][2]int{{0, 0}, {0, 1}, {1, 0}, {1, 1}}, WindowSize: 4096,
		Buffers: []engine.BufferSpec{{Name: "in", NBytes: 1024}, {Name: "out", NBytes: 1024}}, RetainAfterRun: retain}
}

// gdomNames lists the windows and headers of global domains that exist
// under this process's prefix, which its node processes and their chips
// share (the chips of a process-mode node put them there).
func gdomNames(t *testing.T, tr *tree) []string {
	t.Helper()
	names, err := shm.Leftovers(shm.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.Contains(n, "-gdom-") {
			out = append(out, n)
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
			tr := l4OverProcChips(t, l4mode, nil)
			w := tr.w
			big := bytes.Repeat([]byte("0123456789abcdef"), 1<<17)
			var d *global.Domain
			mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
				spec := fourRanks(false)
				spec.WindowSize = 4 << 20
				d = enginetest.Must(global.Allocate(o, spec))
				if n := len(gdomNames(t, tr)); n != 5 {
					t.Errorf("%d window and header objects for four ranks, want 5", n)
				}
				enginetest.Must(0, d.CopyToGlobal(3, []byte("hello"), "out", 10))
				if got := enginetest.Must(d.CopyFromGlobal(3, 5, "out", 10)); string(got) != "hello" {
					t.Errorf("staged back %q", got)
				}
				enginetest.Must(0, d.CopyToGlobal(1, big, "", 2048))
				if got := enginetest.Must(d.CopyFromGlobal(1, len(big), "", 2048)); !bytes.Equal(got, big) {
					t.Error("a 2 MiB staging round trip came back changed")
				}
			}))
			if !d.Freed() {
				t.Fatal("not freed at the fence")
			}
			if left := gdomNames(t, tr); len(left) != 0 {
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
	tr := l4OverProcChips(t, "thread", nil)
	w := tr.w
	sp := newSpace(t)
	_, host, err := sp.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
		d := enginetest.Must(global.Allocate(o, fourRanks(false)))
		enginetest.Must(0, d.CopyToGlobal(3, []byte("in chip 3 window"), "in", 0))
		node := w.Children()[1]
		view := enginetest.Must(global.View(node, d.ID()))
		c := enginetest.Must(node.Devices().Memory(1))
		if _, isProc := c.(*chip); !isProc {
			t.Fatalf("chip 1 of node 1 is a %T, not a process", c)
		}
		enginetest.Must(0, c.CopyOut(host, view[1].BufferPtrs["in"]))
		if string(host) != "in chip 3 window" {
			t.Errorf("the chip process sees %q at its window", host)
		}
		if err := c.Check(view[1].DeviceCtx, 64); err != nil || view[1].DeviceCtx == 0 {
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
			tr := l4OverProcChips(t, l4mode, nil)
			w := tr.w
			for _, phase := range []string{"comm_init", "prepare", "import", "commit"} {
				for node := 0; node < 2; node++ {
					point := fmt.Sprintf("global.%s@%d", phase, node)
					if err := fault.Load(point); err != nil {
						t.Fatal(err)
					}
					err := submitRun(t, w, func(o *engine.Orchestrator) error {
						_, err := global.Allocate(o, fourRanks(false))
						return err
					})
					if err == nil || !strings.Contains(err.Error(), "injected fault at "+point) {
						t.Errorf("%s: got %v", point, err)
					}
					if left := gdomNames(t, tr); len(left) != 0 {
						t.Errorf("%s: left after the abort: %v", point, left)
					}
				}
			}
			fault.Load("")
			mustRun(t, w, func(o *engine.Orchestrator) error {
				_, err := global.Allocate(o, fourRanks(false))
				return err
			})
		})
	}
}

// An ABORT that fails on a node of process-mode chips poisons the broker
// and keeps the primary error, as over thread-mode chips.
func TestGlobalDomainProcessChipsAbortFailurePoisons(t *testing.T) {
	tr := l4OverProcChips(t, "thread", nil)
	w := tr.w
	t.Cleanup(func() { fault.Load("") })
	fault.Load("global.commit@1,global.abort@0")
	err := submitRun(t, w, func(o *engine.Orchestrator) error {
		_, err := global.Allocate(o, fourRanks(false))
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "global.commit@1") {
		t.Fatalf("primary error: %v", err)
	}
	_, err = w.Submit(asBuild(func(o *engine.Orchestrator) error { return nil }))
	if err == nil || !strings.Contains(err.Error(), "global.abort@0") {
		t.Fatalf("a poisoned worker accepted work: %v", err)
	}
	if n := len(gdomNames(t, tr)); n == 0 {
		t.Error("the failed abort of node 0 released its windows anyway")
	}
	global.ReleaseHosted(w.Children()[0]) // what the failed abort left on node 0
	if left := gdomNames(t, tr); len(left) != 0 {
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
			var tr *tree
			var armed atomic.Bool
			armed.Store(true)
			dies := fmt.Sprintf("chip_worker %d (device %d)", c.local, 2*c.node+c.local)
			// After the dying chip's own node answered: a phase goes to every
			// node at once, so another node's answer may come first.
			node := fmt.Sprintf("child_worker %d", c.node)
			tr = l4OverProcChips(t, "thread", func(e engine.Event) {
				if e.Kind == engine.GlobalStep && e.Callable == c.after && e.Worker == node && armed.CompareAndSwap(true, false) {
					p := tr.chips[c.node].lookup(dies)
					p.Kill()
					<-p.cur.Load().exited
				}
			})
			w := tr.w
			var d *global.Domain
			err := submitRun(t, w, func(o *engine.Orchestrator) (err error) {
				d, err = global.Allocate(o, fourRanks(false))
				return err
			})
			switch {
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), "child process")):
				t.Errorf("got %v, want an error with %q naming the child process", err, c.wantErr)
			case c.wantErr == "" && (err != nil || !d.Freed()):
				t.Errorf("a domain whose chip died after COMMIT: %v (freed %v)", err, d != nil && d.Freed())
			}
			if left := gdomNames(t, tr); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
			// Not poisoned: a domain over the other node still works.
			other := 1 - c.node
			mustRun(t, w, func(o *engine.Orchestrator) error {
				_, err := global.Allocate(o, global.Spec{Name: "after", Members: [][2]int{{other, 0}, {other, 1}}, WindowSize: 64})
				return err
			})
		})
	}
}

// nodeObjects counts the shared-memory objects the processes this one
// started hold beyond their base (a committed rank holds its window and
// header): they share this process's prefix, and what this process made
// itself is not theirs.
func nodeObjects(t *testing.T, tr *tree) int {
	t.Helper()
	objs, err := shm.Leftovers(shm.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	return len(objs) - len(shm.Owned())
}

// Process-mode local nodes serve the same transaction and staging through
// their mailboxes; a failure at each phase on each node rolls back what
// every node made, and the next allocation works.
func TestGlobalDomainOverProcessNodes(t *testing.T) {
	tr := newTree(t, "process", "thread", nil)
	w := tr.w
	base := nodeObjects(t, tr)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<17) // 2 MiB: several mailbox messages
	var d *global.Domain
	mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
		spec := fourRanks(false)
		spec.WindowSize = 4 << 20
		d = enginetest.Must(global.Allocate(o, spec))
		if nodeObjects(t, tr) <= base {
			t.Error("the node processes made no windows")
		}
		enginetest.Must(0, d.CopyToGlobal(3, []byte("hello"), "out", 10))
		if got := enginetest.Must(d.CopyFromGlobal(3, 5, "out", 10)); string(got) != "hello" {
			t.Errorf("staged back %q", got)
		}
		enginetest.Must(0, d.CopyToGlobal(0, big, "", 2048))
		if got := enginetest.Must(d.CopyFromGlobal(0, len(big), "", 2048)); !bytes.Equal(got, big) {
			t.Error("a 2 MiB staging round trip through the mailbox came back changed")
		}
		if _, err := d.CopyFromGlobal(2, 1, "in", 1024); err == nil || !strings.Contains(err.Error(), "overrun") {
			t.Errorf("overrun: %v", err)
		}
	}))
	// A freed domain's windows go back to their node's pool of global
	// windows (hal/comm): at most one per rank and the header stay, idle.
	if n := nodeObjects(t, tr); !d.Freed() || n < base || n > base+5 {
		t.Fatalf("freed %v; node objects %d, want %d..%d (the idle pool)", d.Freed(), n, base, base+5)
	}
	// Warm the pool at the size the aborted allocations below use: then
	// each abort must leave exactly what this left, nothing more.
	mustRun(t, w, func(o *engine.Orchestrator) error {
		_, err := global.Allocate(o, fourRanks(false))
		return err
	})
	base = nodeObjects(t, tr)
	t.Cleanup(func() { fault.Load("") })
	for _, phase := range []string{"comm_init", "prepare", "import", "commit"} {
		for node := 0; node < 2; node++ {
			point := fmt.Sprintf("global.%s@%d", phase, node)
			// The domain is warm (the same members and window size as the
			// one before): REATTACH fails first, so the full transaction
			// runs and meets the point.
			fault.Load("global.reattach@1," + point)
			err := submitRun(t, w, func(o *engine.Orchestrator) error {
				_, err := global.Allocate(o, fourRanks(false))
				return err
			})
			if err == nil || !strings.Contains(err.Error(), "injected fault at "+point) {
				t.Errorf("%s: got %v", point, err)
			}
			if n := nodeObjects(t, tr); n != base {
				t.Errorf("%s: %d shared-memory objects in the nodes after the abort, %d before (the idle pool)", point, n, base)
			}
		}
	}
	fault.Load("")
	mustRun(t, w, func(o *engine.Orchestrator) error {
		_, err := global.Allocate(o, fourRanks(false))
		return err
	})
}

// Process-mode nodes (their chips in the node's process) pool their
// windows, so a domain over the same members again is one REATTACH phase
// through the mailboxes, its windows zeroed; nodes whose chips are
// processes pool nothing, so the broker remembers nothing for them and
// every domain takes the full transaction.
func TestGlobalDomainWarmOverProcessNodes(t *testing.T) {
	for _, c := range []struct {
		l3mode string
		warm   bool
	}{{"thread", true}, {"process", false}} {
		var mu sync.Mutex
		reattaches, prepares := 0, 0
		tr := newTree(t, "process", c.l3mode, func(e engine.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case e.Kind != engine.GlobalStep:
			case e.Callable == "REATTACH":
				reattaches++
			case e.Callable == "PREPARE":
				prepares++
			}
		})
		for i := 0; i < 3; i++ {
			mustRun(t, tr.w, buildErr(func(o *engine.Orchestrator) {
				d := enginetest.Must(global.Allocate(o, fourRanks(false)))
				if got := enginetest.Must(d.CopyFromGlobal(3, 4, "out", 0)); string(got) != "\x00\x00\x00\x00" {
					t.Errorf("%s chips, round %d: rank 3's window reads %q, want zeroes", c.l3mode, i, got)
				}
				enginetest.Must(0, d.CopyToGlobal(3, []byte("used"), "out", 0))
			}))
		}
		mu.Lock()
		wantR, wantP := 4, 2 // two warm rounds after a cold one, on two nodes
		if !c.warm {
			wantR, wantP = 0, 6
		}
		if reattaches != wantR || prepares != wantP {
			t.Errorf("%s chips: %d REATTACH and %d PREPARE, want %d and %d", c.l3mode, reattaches, prepares, wantR, wantP)
		}
		mu.Unlock()
	}
}
