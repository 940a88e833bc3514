package engine

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"simpler/internal/hostid"
	"simpler/wire"
)

// fakeNode is a remote node that is never sent anything but its close:
// enough for what the broker decides before any node command.
type fakeNode struct {
	host   hostid.ID
	closed func()
}

func (n *fakeNode) Start(any, *Handle, *TaskArgs, *CallConfig, func(error) func()) error {
	return Errorf(RuntimeError, "fake node")
}
func (n *fakeNode) Cancel(any, string) {}
func (n *fakeNode) Control(*wire.Control) (wire.ControlReply, error) {
	return wire.ControlReply{}, Errorf(RuntimeError, "fake node: sent a command")
}
func (n *fakeNode) ControlData(*wire.Control, []byte, []byte) (wire.ControlReply, func(), error) {
	return wire.ControlReply{}, func() {}, Errorf(RuntimeError, "fake node: sent a command")
}
func (n *fakeNode) Register(Callable) error { return nil }
func (n *fakeNode) Lost() error             { return nil }
func (n *fakeNode) Fail(error)              {}
func (n *fakeNode) Host() hostid.ID         { return n.host }
func (n *fakeNode) Close() {
	if n.closed != nil {
		n.closed()
	}
}

// fakeGroup is a started group of fake nodes, recording the order of
// what closing did.
type fakeGroup struct {
	nodes []RemoteNode
	log   *[]string
	mu    *sync.Mutex
}

func (g *fakeGroup) Nodes() []RemoteNode { return g.nodes }
func (g *fakeGroup) Close(time.Duration) error {
	g.mu.Lock()
	*g.log = append(*g.log, "launcher")
	g.mu.Unlock()
	return nil
}
func (g *fakeGroup) Kill() {}

// add_worker_group checks every argument where it is given, before init.
func TestAddWorkerGroupRefusals(t *testing.T) {
	tokFile := filepath.Join(t.TempDir(), "t")
	os.WriteFile(tokFile, []byte("0123456789abcdef0123\n"), 0o600)
	ok := GroupSpec{Ranks: 2, Launcher: LauncherMPI, Platform: "a2a3sim", DeviceIDs: []int{0}, Listen: "127.0.0.1:0"}
	cases := []struct {
		change func(*GroupSpec)
		want   string
	}{
		{func(s *GroupSpec) { s.Ranks = 0 }, "ranks must be in 1..4096, got 0"},
		{func(s *GroupSpec) { s.Launcher = "ssh" }, `launcher must be "mpirun", "srun" or "none", got "ssh"`},
		{func(s *GroupSpec) { s.Platform = "tpu" }, "platform"},
		{func(s *GroupSpec) { s.DeviceIDs = nil }, "device_ids must not be empty"},
		{func(s *GroupSpec) { s.DeviceIDs = []int{0, 0} }, "listed twice"},
		{func(s *GroupSpec) { s.NumSubWorkers = -1 }, "num_sub_workers"},
		{func(s *GroupSpec) { s.GlobalDeviceRanks = []int{0, 1, 2} }, "3 global_device_ranks for 2 ranks of 1 device_ids"},
		{func(s *GroupSpec) { s.GlobalDeviceRanks = []int{4, 4} }, "listed twice"},
		{func(s *GroupSpec) { s.Launcher, s.Hosts = LauncherNone, []string{"a"} }, `launcher="none" starts nothing`},
		{func(s *GroupSpec) { s.Hosts = []string{"a,b"} }, "is not a host name"},
		{func(s *GroupSpec) { s.Listen = "127.0.0.1" }, "is not host:port"},
		{func(s *GroupSpec) { s.Listen = "127.0.0.1:99999" }, "is not host:port"},
		{func(s *GroupSpec) { s.Listen = "0.0.0.0:7000" }, "needs token_file="},
		{func(s *GroupSpec) { s.Hosts = []string{"node7:2"} }, `hosts[0] = "node7:2": a rank there could not reach listen="127.0.0.1:0"`},
		{func(s *GroupSpec) { s.TokenFile = filepath.Join(t.TempDir(), "missing") }, "token_file"},
	}
	for _, c := range cases {
		w := must(NewWorker(Config{Level: 4, Platform: sim(t)}))
		spec := ok
		c.change(&spec)
		_, err := w.AddWorkerGroup(spec)
		if KindOf(err) != ValueError || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "add_worker_group") {
			t.Errorf("%+v: %v, want a ValueError saying %q", spec, err, c.want)
		}
		w.Close()
	}
	w3 := must(NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0}}))
	defer w3.Close()
	if _, err := w3.AddWorkerGroup(ok); err == nil || !strings.Contains(err.Error(), "level-4") {
		t.Errorf("on a level-3 worker: %v", err)
	}
	// A group beyond this host with its token file is accepted; the ids
	// follow the other children's.
	w := must(NewWorker(Config{Level: 4, Platform: sim(t)}))
	defer w.Close()
	must(w.AddRemoteWorker(RemoteSpec{Endpoint: "127.0.0.1:7700", Platform: "a2a3sim", DeviceIDs: []int{0}, Token: []byte("0123456789abcdef")}))
	spec := ok
	spec.Listen, spec.TokenFile, spec.Hosts, spec.Ranks, spec.GlobalDeviceRanks = "0.0.0.0:7000", tokFile, []string{"a:1", "b:2"}, 3, []int{5, 6, 7}
	ids, err := w.AddWorkerGroup(spec)
	if err != nil || !slices.Equal(ids, []int{1, 2, 3}) {
		t.Fatalf("ids %v, %v", ids, err)
	}
	if got := w.Nodes().Spec(2).GlobalDeviceRanks; !slices.Equal(got, []int{6}) {
		t.Errorf("rank 1's global device ranks %v, want [6]", got)
	}
	if err := w.Init(); KindOf(err) != RuntimeError || !strings.Contains(err.Error(), "no transport for worker groups (Config.StartGroup is nil") {
		t.Errorf("init without a group starter: %v", err)
	}
}

// Init starts a group through Config.StartGroup with one dial request
// per rank; close closes the ranks' nodes, then the group's launcher.
func TestWorkerGroupLifecycle(t *testing.T) {
	var mu sync.Mutex
	var log []string
	var got GroupRequest
	start := func(req GroupRequest) (RemoteGroup, error) {
		got = req
		g := &fakeGroup{log: &log, mu: &mu}
		for r := range req.Ranks {
			g.nodes = append(g.nodes, &fakeNode{host: hostid.Local(), closed: func() {
				mu.Lock()
				log = append(log, "rank "+string(rune('0'+r)))
				mu.Unlock()
			}})
		}
		return g, nil
	}
	w := must(NewWorker(Config{Level: 4, Platform: sim(t), StartGroup: start, CommProfile: "sim"}))
	ids := must(w.AddWorkerGroup(GroupSpec{Ranks: 2, Launcher: LauncherNone, Platform: "a2a3sim", DeviceIDs: []int{0, 1}, Listen: "127.0.0.1:0"}))
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	if got.Name != "worker group 0" || len(got.Ranks) != 2 || got.Ranks[1].ID != ids[1] || got.Ranks[1].Name != "remote_worker 1 (rank 1 of worker group 0)" ||
		got.Ranks[0].Parent == 0 || got.Deadline.IsZero() || got.Spec.CommProfile != "sim" {
		t.Errorf("request %+v", got)
	}
	if !w.Nodes().IsRemote(ids[0]) || w.Nodes().Remote(ids[1]) == nil {
		t.Error("the ranks are not remote nodes of the worker")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(log, []string{"rank 0", "rank 1", "launcher"}) {
		t.Errorf("close did %v, want the ranks, then the launcher", log)
	}
	// A group that fails leaves the worker NEW, with nothing open.
	w = must(NewWorker(Config{Level: 4, Platform: sim(t), StartGroup: func(GroupRequest) (RemoteGroup, error) {
		return nil, Errorf(TimeoutError, "worker group 0: rank 1 of 2 did not join")
	}}))
	defer w.Close()
	must(w.AddWorkerGroup(GroupSpec{Ranks: 2, Launcher: LauncherNone, Platform: "a2a3sim", DeviceIDs: []int{0}, Listen: "127.0.0.1:0"}))
	if err := w.Init(); KindOf(err) != TimeoutError {
		t.Errorf("init of a failing group: %v", err)
	}
}
