package engine

import (
	"sync"
	"testing"

	"simpler/hal/comm"
	"simpler/internal/hostid"
	"simpler/wire"
)

// fakeProc is a child process that runs nothing: enough to see which
// slots a tree makes of it and what closing and killing reach.
type fakeProc struct {
	mu             sync.Mutex
	closed, killed int
}

func (p *fakeProc) Run(*Handle, *TaskArgs, *CallConfig, *Stopper) error { return nil }
func (p *fakeProc) RunRecorded(*Handle, *TaskArgs, *Stopper, uintptr) ([]byte, error) {
	return nil, nil
}
func (p *fakeProc) Register(Callable) error { return nil }
func (p *fakeProc) Kill()                   { p.mu.Lock(); p.killed++; p.mu.Unlock() }
func (p *fakeProc) Close() error            { p.mu.Lock(); p.closed++; p.mu.Unlock(); return nil }
func (p *fakeProc) Memory() ChipMemory      { return nil }
func (p *fakeProc) AllocateRank(comm.Request, int) (DomainRank, error) {
	return DomainRank{}, Errorf(RuntimeError, "fake process")
}
func (p *fakeProc) PrepareGlobalRank(comm.GlobalRequest, int) (NodeRank, comm.Descriptor, error) {
	return nil, comm.Descriptor{}, Errorf(RuntimeError, "fake process")
}
func (p *fakeProc) Command(*wire.Control) (wire.ControlReply, error) {
	return wire.ControlReply{}, nil
}

// ends is how many times p was closed and killed.
func (p *fakeProc) ends() (closed, killed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed, p.killed
}

// fakeSpawner hands out fakeProcs and keeps them.
type fakeSpawner struct {
	mu    sync.Mutex
	procs []*fakeProc
}

func (s *fakeSpawner) spawn() *fakeProc {
	p := &fakeProc{}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p
}
func (s *fakeSpawner) SpawnChip(SpawnRequest) (ChipProcess, error) { return s.spawn(), nil }
func (s *fakeSpawner) SpawnSub(SpawnRequest) (Process, error)      { return s.spawn(), nil }
func (s *fakeSpawner) SpawnNode(SpawnRequest) (NodeProcess, error) { return s.spawn(), nil }

// checkLoop fails unless endpoint e is a loop endpoint whose members run
// the way its slot's kind says.
func checkLoop(t *testing.T, what string, e Endpoint, inProc, recorded, spin bool) {
	t.Helper()
	l, ok := e.(*loopEndpoint)
	if !ok {
		t.Fatalf("%s: a %T, not a loop endpoint", what, e)
	}
	if l.inProc != inProc || l.recorded != recorded || l.spin != spin {
		t.Errorf("%s: inProc %v recorded %v spin %v, want %v %v %v", what, l.inProc, l.recorded, l.spin, inProc, recorded, spin)
	}
}

// In thread mode a level-3 tree's slots are its chips and SUB workers
// of this process; their endpoints run members on their goroutines and
// poll for the next.
func TestTreeOfThreadModeChips(t *testing.T) {
	w := must(NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0, 1}, NumSubWorkers: 1}))
	must(0, w.Init())
	defer w.Close()
	tr := &w.tree
	for i, c := range tr.chips {
		if _, ok := c.(*hereChip); !ok || c.here() == nil {
			t.Errorf("chip %d is a %T", i, c)
		}
		checkLoop(t, "chip endpoint", tr.nextEP[i], true, false, true)
	}
	if _, ok := tr.subs[0].(hereSub); !ok {
		t.Errorf("sub 0 is a %T", tr.subs[0])
	}
	checkLoop(t, "sub endpoint", tr.subEP[0], true, false, true)
	if !tr.chipsHere || !tr.spin {
		t.Errorf("chipsHere %v spin %v, want both", tr.chipsHere, tr.spin)
	}
	if len(w.Devices().LocalChips()) != 2 {
		t.Errorf("%d local chips, want 2", len(w.Devices().LocalChips()))
	}
}

// In process mode a level-3 tree's slots are processes from the Spawner;
// their members are recorded there under --race, their endpoints do not
// poll, and a kill and a close each reach every process once.
func TestTreeOfProcessModeChips(t *testing.T) {
	sp := &fakeSpawner{}
	w := must(NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0, 1}, NumSubWorkers: 1, Mode: "process", Spawn: sp, Launcher: &Launcher{Path: "/nonexistent/simpler"}}))
	must(0, w.Init())
	tr := &w.tree
	for i, c := range tr.chips {
		if _, ok := c.(*procChip); !ok || c.here() != nil {
			t.Errorf("chip %d is a %T", i, c)
		}
		checkLoop(t, "chip endpoint", tr.nextEP[i], false, true, false)
	}
	if _, ok := tr.subs[0].(*procSub); !ok {
		t.Errorf("sub 0 is a %T", tr.subs[0])
	}
	checkLoop(t, "sub endpoint", tr.subEP[0], false, true, false)
	if tr.chipsHere || tr.spin {
		t.Errorf("chipsHere %v spin %v, want neither", tr.chipsHere, tr.spin)
	}
	if _, err := w.Devices().Chip(0); KindOf(err) != RuntimeError {
		t.Errorf("a chip process as a hal.Chip: %v", err)
	}
	w.Kill()
	must(0, w.Close())
	if len(sp.procs) != 3 {
		t.Fatalf("%d processes, want 3", len(sp.procs))
	}
	for i, p := range sp.procs {
		if closed, killed := p.ends(); closed != 1 || killed != 1 {
			t.Errorf("process %d closed %d and killed %d times, want once each", i, closed, killed)
		}
	}
}

// A process-mode level-4 tree makes a node process of a local child and
// a remote slot of a remote node, which runs members ahead (its depth);
// the Nodes view answers for each, and after close for neither.
func TestTreeOfNodes(t *testing.T) {
	sp := &fakeSpawner{}
	far := hostid.ID{Name: "far", Key: [32]byte{1}}
	var closedRemote int
	dial := func(DialRequest) (RemoteNode, error) {
		return &fakeNode{host: far, closed: func() { closedRemote++ }}, nil
	}
	w := must(NewWorker(Config{Level: 4, Platform: sim(t), Mode: "process", Spawn: sp, Dial: dial, Launcher: &Launcher{Path: "/nonexistent/simpler"}}))
	child := must(NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0}}))
	must(w.AddWorker(child))
	must(w.AddRemoteWorker(RemoteSpec{Endpoint: "127.0.0.1:7700", Platform: "a2a3sim", DeviceIDs: []int{0}, Token: []byte("0123456789abcdef")}))
	must(0, w.Init())
	tr := &w.tree
	if _, ok := tr.nodes[0].(*procNode); !ok {
		t.Errorf("node 0 is a %T", tr.nodes[0])
	}
	checkLoop(t, "node process endpoint", tr.nextEP[0], false, false, false)
	if _, ok := tr.nextEP[1].(*remoteEndpoint); !ok || tr.nodes[1].depth() != RemoteDepth {
		t.Errorf("node 1's endpoint is a %T of depth %d", tr.nextEP[1], tr.nodes[1].depth())
	}
	ns := w.Nodes()
	if ns.IsRemote(0) || !ns.IsRemote(1) || ns.Remote(0) != nil || ns.Remote(1) == nil {
		t.Error("the view does not tell the local node from the remote one")
	}
	if ns.Host(0) != hostid.Local() || ns.Host(1) != far {
		t.Errorf("hosts %v and %v", ns.Host(0), ns.Host(1))
	}
	if _, ok := ns.Node(0).(*fakeProc); !ok {
		t.Errorf("node 0 is commanded through a %T, not its process", ns.Node(0))
	}
	must(0, w.Close())
	if closed, _ := sp.procs[0].ends(); closed != 1 || closedRemote != 1 {
		t.Errorf("close reached the node process %d and the remote node %d times, want once each", closed, closedRemote)
	}
	if ns.Remote(1) != nil || ns.Host(1) != hostid.Local() {
		t.Error("the view still answers for a closed tree")
	}
	if _, err := ns.Node(1).Command(&wire.Control{}); KindOf(err) != RuntimeError {
		t.Errorf("a command to a closed tree's node: %v", err)
	}
	child.mu.Lock()
	state := child.state
	child.mu.Unlock()
	if state != stateClosed {
		t.Error("the child Worker the node process was made from is not closed with it")
	}
}
