package global

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"simpler/engine"
	"simpler/internal/enginetest"
	"simpler/internal/fault"
	"simpler/wire"
)

// l4Nodes makes a level-4 worker over level-3 nodes in this process:
// those nodes configure (each a level-3 sim worker, by default on devices
// 2n and 2n+1), or two such nodes if none is given.
func l4Nodes(t *testing.T, nodes ...engine.Config) *engine.Worker {
	t.Helper()
	if len(nodes) == 0 {
		nodes = make([]engine.Config, 2)
	}
	for n := range nodes {
		if nodes[n].DeviceIDs == nil {
			nodes[n].DeviceIDs = []int{2 * n, 2*n + 1}
		}
	}
	return enginetest.Up(t, l4Tree(t, nodes), "unusable")
}

func fourRanks(retain bool) Spec {
	return Spec{Name: "g", Members: [][2]int{{0, 0}, {0, 1}, {1, 0}, {1, 1}}, WindowSize: 4096,
		Buffers: []engine.BufferSpec{{Name: "in", NBytes: 1024}, {Name: "out", NBytes: 1024}}, RetainAfterRun: retain}
}

func nodeGlobals(w *engine.Worker) int {
	n := 0
	for _, c := range w.Children() {
		if c != nil { // a remote node
			n += Hosted(c)
		}
	}
	return n
}

func TestGlobalDomainCommitsStagesAndFrees(t *testing.T) {
	w := l4Nodes(t)
	var d *Domain
	mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
		d = enginetest.Must(Allocate(o, fourRanks(false)))
		for n := 0; n < 2; n++ {
			view := enginetest.Must(View(w.Children()[n], d.ID()))
			if len(view) != 2 || view[1].Rank != 2*n+1 || view[1].Size != 4 || view[1].BufferPtrs["out"] != view[1].WindowBase+1024 {
				t.Errorf("node %d view %+v", n, view[1])
			}
		}
		enginetest.Must(0, d.CopyToGlobal(3, []byte("hello"), "out", 10))
		if got := enginetest.Must(d.CopyFromGlobal(3, 5, "out", 10)); string(got) != "hello" {
			t.Errorf("staged back %q", got)
		}
		if _, err := d.CopyFromGlobal(3, 20, "out", 1010); err == nil || !strings.Contains(err.Error(), "overrun the 1024-byte buffer out") {
			t.Errorf("overrun staging: %v", err)
		}
		if _, err := d.CopyFromGlobal(4, 1, "", 0); engine.KindOf(err) != engine.IndexError {
			t.Errorf("rank out of range: %v", err)
		}
		if _, err := d.CopyFromGlobal(0, MaxCopy+1, "", 0); err == nil {
			t.Error("a staging copy over the bound was accepted")
		}
	}))
	if !d.Freed() || nodeGlobals(w) != 0 {
		t.Fatalf("freed %v, %d node domains left", d.Freed(), nodeGlobals(w))
	}
	if _, err := View(w.Children()[0], d.ID()); engine.KindOf(err) != engine.KeyError {
		t.Errorf("view of a freed domain: %v", err)
	}
}

// The rollback matrix: a failure at each phase on each node leaves no
// domain on any node, keeps the primary error, and the next allocation
// works.
func TestGlobalDomainRollbackMatrix(t *testing.T) {
	w := l4Nodes(t)
	t.Cleanup(func() { fault.Load("") })
	for _, phase := range []string{"comm_init", "prepare", "import", "commit"} {
		for node := 0; node < 2; node++ {
			point := fmt.Sprintf("global.%s@%d", phase, node)
			if err := fault.Load(point); err != nil {
				t.Fatal(err)
			}
			err := submitRun(t, w, func(o *engine.Orchestrator) error {
				_, err := Allocate(o, fourRanks(false))
				return err
			})
			if err == nil || !strings.Contains(err.Error(), "injected fault at "+point) {
				t.Errorf("%s: got %v", point, err)
			}
			if n := nodeGlobals(w); n != 0 {
				t.Errorf("%s: %d node domains left after the abort", point, n)
			}
		}
	}
	fault.Load("")
	mustRun(t, w, func(o *engine.Orchestrator) error {
		_, err := Allocate(o, fourRanks(false))
		return err
	})
}

// An ABORT that fails leaves state nothing can reach: the worker refuses
// work with that failure as the cause; the primary error is kept.
func TestGlobalDomainAbortFailurePoisons(t *testing.T) {
	w := l4Nodes(t)
	t.Cleanup(func() { fault.Load("") })
	if err := fault.Load("global.import@1,global.abort@0"); err != nil {
		t.Fatal(err)
	}
	err := submitRun(t, w, func(o *engine.Orchestrator) error {
		_, err := Allocate(o, fourRanks(false))
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "global.import@1") {
		t.Fatalf("primary error: %v", err)
	}
	_, err = w.Submit(asBuild(func(o *engine.Orchestrator) error { return nil }))
	if err == nil || !strings.Contains(err.Error(), "global.abort@0") {
		t.Fatalf("a poisoned worker accepted work: %v", err)
	}
	ReleaseHosted(w.Children()[0]) // what the failed abort left on node 0
}

// A retained domain survives its run's fence; a release that fails leaves
// the handle released, not freed and retryable (lifetime): it refuses new
// use, the worker keeps working, and the next release frees it.
func TestGlobalDomainRetainedAndReleaseRetry(t *testing.T) {
	w := l4Nodes(t)
	t.Cleanup(func() { fault.Load("") })
	var d *Domain
	mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
		d = enginetest.Must(Allocate(o, fourRanks(true)))
		enginetest.Must(0, d.CopyToGlobal(0, []byte{42}, "in", 0))
	}))
	if d.Freed() || d.Released() {
		t.Fatal("a retained domain was released at its fence")
	}
	if got := enginetest.Must(d.CopyFromGlobal(0, 1, "in", 0)); got[0] != 42 {
		t.Fatalf("after the run: %v", got)
	}
	fault.Load("global.release@0")
	if err := d.Release(); err == nil || !strings.Contains(err.Error(), "global.release@0") || !d.Released() || d.Freed() {
		t.Fatalf("failed release: %v released %v freed %v", err, d.Released(), d.Freed())
	}
	if n := nodeGlobals(w); n != 1 {
		t.Errorf("%d node domains after node 0's release failed, want node 0's", n)
	}
	if _, err := d.CopyFromGlobal(0, 1, "in", 0); err == nil || !strings.Contains(err.Error(), "was released") {
		t.Errorf("staging into a domain whose release failed: %v", err)
	}
	mustRun(t, w, func(o *engine.Orchestrator) error { return nil }) // not poisoned
	if err := d.Release(); err != nil || !d.Freed() || nodeGlobals(w) != 0 {
		t.Fatalf("retry: %v freed %v left %d", err, d.Freed(), nodeGlobals(w))
	}
}

// A free that fails at the fence is the run's error; the domain stays
// released and not freed, and the worker's close frees it.
func TestGlobalDomainFailedFenceFreeRetriedAtClose(t *testing.T) {
	w := l4Nodes(t)
	t.Cleanup(func() { fault.Load("") })
	fault.Load("global.release@1")
	var d *Domain
	err := submitRun(t, w, buildErr(func(o *engine.Orchestrator) { d = enginetest.Must(Allocate(o, fourRanks(false))) }))
	if err == nil || !strings.Contains(err.Error(), `releasing global domain "g" on node 1`) || !strings.Contains(err.Error(), "global.release@1") {
		t.Fatalf("run error: %v", err)
	}
	if !d.Released() || d.Freed() || nodeGlobals(w) != 1 {
		t.Fatalf("released %v freed %v, %d node domains", d.Released(), d.Freed(), nodeGlobals(w))
	}
	// Not poisoned, and the name of a released domain is free again.
	mustRun(t, w, func(o *engine.Orchestrator) error { _, err := Allocate(o, fourRanks(false)); return err })
	if err := w.Close(); err != nil || !d.Freed() {
		t.Fatalf("close: %v, freed %v", err, d.Freed())
	}
}

// A free that fails at close has no later call to retry it: close reports
// it, the worker is poisoned with it, and a release replays it.
func TestGlobalDomainFailedFreeAtClosePoisons(t *testing.T) {
	w := l4Nodes(t)
	t.Cleanup(func() { fault.Load("") })
	var d *Domain
	mustRun(t, w, buildErr(func(o *engine.Orchestrator) { d = enginetest.Must(Allocate(o, fourRanks(true))) }))
	fault.Load("global.release@0")
	err := w.Close()
	if err == nil || !strings.Contains(err.Error(), "global.release@0") {
		t.Fatalf("close: %v", err)
	}
	if p := w.Poisoned(); p == nil || !strings.Contains(p.Error(), "global.release@0") {
		t.Errorf("poisoned with %v", p)
	}
	if err2 := d.Release(); err2 == nil || err2.Error() != err.Error() || d.Freed() {
		t.Errorf("release after close: %v (freed %v), want %v replayed", err2, d.Freed(), err)
	}
}

func TestGlobalDomainValidation(t *testing.T) {
	w := l4Nodes(t)
	many := make([][2]int, MaxMembers+1)
	for i := range many {
		many[i] = [2]int{0, 0}
	}
	cases := []struct {
		spec Spec
		want string
	}{
		{Spec{Name: "g", WindowSize: 64}, "0 members"},
		{Spec{Name: "g", Members: many, WindowSize: 64}, "4097 members; a global domain has 1..4096"},
		{Spec{Name: "g", Members: [][2]int{{0, 0}, {0, 0}}, WindowSize: 64}, "listed twice"},
		{Spec{Name: "g", Members: [][2]int{{2, 0}}, WindowSize: 64}, "node 2 is not a level-3 node"},
		{Spec{Name: "g", Members: [][2]int{{1, 2}}, WindowSize: 64}, "node 1 has no local worker 2"},
		{Spec{Name: "g", Members: [][2]int{{0, 0}}, WindowSize: 0}, "window_size must be > 0"},
		{Spec{Name: "g", Members: [][2]int{{0, 0}}, WindowSize: 1 << 50}, "window_size=1125899906842624 exceeds the 68719476736 bytes of device memory of a a2a3sim chip"},
		{Spec{Name: "g", Members: [][2]int{{0, 0}}, WindowSize: 64, Buffers: []engine.BufferSpec{{Name: "a", NBytes: 100}}}, "buffers sum to 100 bytes, exceeds window_size=64"},
	}
	mustRun(t, w, func(o *engine.Orchestrator) error {
		for _, c := range cases {
			if _, err := Allocate(o, c.spec); engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%q: got %v", c.want, err)
			}
		}
		return nil
	})
	if n := nodeGlobals(w); n != 0 {
		t.Errorf("%d node domains after refusals", n)
	}
	l3 := newNode(t, engine.Config{})
	err := submitRun(t, l3, func(o *engine.Orchestrator) error { _, err := Allocate(o, fourRanks(false)); return err })
	if err == nil || !strings.Contains(err.Error(), "brokered by a level-4") {
		t.Errorf("at level 3: %v", err)
	}
	// One profile for every node, and only pairs a node can serve.
	restore := claimProfile(w.Children()[1], "a3-fabric-v1")
	err = submitRun(t, w, func(o *engine.Orchestrator) error { _, err := Allocate(o, fourRanks(false)); return err })
	if engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), `node 0 uses comm profile "sim" and node 1 "a3-fabric-v1"`) {
		t.Errorf("two profiles: %v", err)
	}
	err = submitRun(t, w, func(o *engine.Orchestrator) error {
		_, err := Allocate(o, Spec{Name: "g", Members: [][2]int{{1, 0}}, WindowSize: 64})
		return err
	})
	if engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), `allocate_global_domain: node 1: comm_profile "a3-fabric-v1" is not supported on a2a3sim (supported: ["sim"])`) {
		t.Errorf("fabric on a simulated platform: %v", err)
	}
	restore()
	for _, c := range []struct{ platform, profile, want string }{
		{"a2a3sim", "sim", ""},
		{"a5sim", "sim", ""},
		{"a2a3sim", "", ""},
		{"a2a3", "sim", `node 0: comm_profile "sim" needs a simulated platform`},
		{"a2a3", "a3-fabric-v1", `node 0: comm_profile "a3-fabric-v1" on a2a3 needs the fabric backend`},
		{"a5", "a3-fabric-v1", `node 0: comm_profile "a3-fabric-v1" is not supported on a5`},
		{"tpu", "sim", `node 0: unknown platform "tpu"`},
	} {
		err := profileServed("allocate_global_domain", 0, c.platform, c.profile)
		if c.want == "" && err != nil || c.want != "" && (engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s on %s: %v, want %q", c.profile, c.platform, err, c.want)
		}
	}
}

// Global device ranks: assigned in node order unless a node gives its
// own; two members with one rank are refused before anything is sent; the
// topology hash names the placement.
func TestGlobalDomainTopology(t *testing.T) {
	w := l4Nodes(t)
	var hashes []string
	for _, members := range [][][2]int{{{0, 0}, {0, 1}, {1, 0}, {1, 1}}, {{1, 1}, {1, 0}, {0, 1}, {0, 0}}, {{0, 0}, {0, 1}, {1, 0}, {1, 1}}} {
		mustRun(t, w, buildErr(func(o *engine.Orchestrator) {
			d := enginetest.Must(Allocate(o, Spec{Name: "t", Members: members, WindowSize: 64}))
			want := []int{}
			for _, m := range members {
				want = append(want, 2*m[0]+m[1])
			}
			if !slices.Equal(d.DeviceRanks(), want) {
				t.Errorf("members %v: device ranks %v, want %v", members, d.DeviceRanks(), want)
			}
			hashes = append(hashes, d.Topology())
		}))
	}
	if hashes[0] != hashes[2] || hashes[0] == hashes[1] || !strings.HasPrefix(hashes[0], "sha256:") {
		t.Errorf("topology hashes %v: want the first and last equal, the middle different", hashes)
	}

	// Node 1 names its own ranks.
	explicit := func(node0, node1 []int) *engine.Worker {
		return l4Nodes(t, engine.Config{GlobalDeviceRanks: node0}, engine.Config{GlobalDeviceRanks: node1})
	}
	mustRun(t, explicit(nil, []int{10, 11}), buildErr(func(o *engine.Orchestrator) {
		d := enginetest.Must(Allocate(o, fourRanks(false)))
		if !slices.Equal(d.DeviceRanks(), []int{0, 1, 10, 11}) {
			t.Errorf("explicit ranks: %v", d.DeviceRanks())
		}
	}))
	// The implicit ones skip every explicit rank, in node order.
	mustRun(t, explicit(nil, []int{1, 5}), buildErr(func(o *engine.Orchestrator) {
		d := enginetest.Must(Allocate(o, fourRanks(false)))
		if !slices.Equal(d.DeviceRanks(), []int{0, 2, 1, 5}) {
			t.Errorf("implicit node 0 beside explicit [1, 5]: %v, want [0 2 1 5]", d.DeviceRanks())
		}
	}))
	mustRun(t, explicit([]int{5, 1}, nil), buildErr(func(o *engine.Orchestrator) {
		d := enginetest.Must(Allocate(o, fourRanks(false)))
		if !slices.Equal(d.DeviceRanks(), []int{5, 1, 0, 2}) {
			t.Errorf("implicit node 1 after explicit [5, 1]: %v, want [5 1 0 2]", d.DeviceRanks())
		}
	}))
	// Two members whose nodes give them one rank are refused, naming both.
	dup := explicit([]int{5, 1}, []int{7, 1})
	err := submitRun(t, dup, func(o *engine.Orchestrator) error { _, err := Allocate(o, fourRanks(false)); return err })
	if engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), "(0, 1) and (1, 1) both have global device rank 1") || nodeGlobals(dup) != 0 {
		t.Errorf("a shared explicit global device rank: %v (%d node domains)", err, nodeGlobals(dup))
	}

	// COMM_INIT re-checks on the node what the broker assumed.
	initCmd := func(node *engine.Worker, table []byte) error {
		c := wire.Control{Cmd: wire.CmdCommInit, Domain: wire.Domain{ID: 99, Generation: 1, Size: 4, Ranks: []wire.DomainRank{{Rank: 2, Worker: 0}}, Table: table}}
		return node.Command(c, &wire.ControlReply{})
	}
	node := w.Children()[1]
	consistent := nodeTopology{Cluster: 7, NodeRank: 1, Nodes: 2, Hash: "sha256:x", DeviceRanks: []int{2}}.encode()
	if err := initCmd(node, consistent); err != nil {
		t.Errorf("a consistent COMM_INIT: %v", err)
	}
	own := newNode(t, engine.Config{DeviceIDs: []int{2, 3}, GlobalDeviceRanks: []int{20, 21}})
	if err := initCmd(own, consistent); err == nil || !strings.Contains(err.Error(), "the broker assumes global device rank 2, this node's is 20") {
		t.Errorf("a device rank the node disagrees with: %v", err)
	}
	if err := initCmd(node, []byte{1, 2}); err == nil || !strings.Contains(err.Error(), "malformed topology") {
		t.Errorf("a malformed topology: %v", err)
	}
	// A node of a profile its platform does not serve, which its Config
	// refuses, so the node is shown one.
	restore := claimProfile(node, "a3-fabric-v1")
	err = initCmd(node, consistent)
	restore()
	if err == nil || !strings.Contains(err.Error(), `COMM_INIT: this node: comm_profile "a3-fabric-v1" is not supported on a2a3sim`) {
		t.Errorf("a node of another profile: %v", err)
	}
}

// claimProfile makes node w's comm profile look like profile, to the
// broker (nodeSpecOf, for any broker) and to the node itself (configOf),
// until the returned restore is called: Config refuses a profile the
// platform does not serve, so only this reaches the checks behind it.
func claimProfile(w *engine.Worker, profile string) (restore func()) {
	spec, config := nodeSpecOf, configOf
	nodeSpecOf = func(b *engine.Worker, node int) engine.RemoteSpec {
		s := spec(b, node)
		if !b.Nodes().IsRemote(node) && b.Children()[node] == w {
			s.CommProfile = profile
		}
		return s
	}
	configOf = func(n *engine.Worker) engine.Config {
		c := config(n)
		if n == w {
			c.CommProfile = profile
		}
		return c
	}
	return func() { nodeSpecOf, configOf = spec, config }
}
