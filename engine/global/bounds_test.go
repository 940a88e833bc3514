package global

import (
	"math"
	"strings"
	"testing"

	"simpler/engine"
	"simpler/hal/comm"
	"simpler/internal/enginetest"
	"simpler/internal/hostid"
	"simpler/wire"
)

// Offsets, sizes and lengths near 2^63 and 2^64 in what a node reads from
// its broker: each must be refused, never wrap into a small number or turn
// negative as an int.

const (
	p63 = uint64(1) << 63
	top = uint64(math.MaxUint64)
)

func TestDecodeDescsBound(t *testing.T) {
	_, err := decodeDescs(make([]byte, (wire.MaxRanks+1)*comm.DescriptorSize))
	wantErrText(t, "a table of MaxRanks+1", err, "exceeds the bound 4096")
	_, err = decodeDescs(make([]byte, comm.DescriptorSize+1))
	wantErrText(t, "a partial descriptor", err, "is not whole descriptors")
}

// A node in the broker's own process gets STAGE commands as the broker
// built them, unbounded by the wire decoder.
func TestGlobalStageBounds(t *testing.T) {
	g := &nodeDomain{req: nodeReq{ID: 1, Gen: 1, WindowSize: 4096, Places: []Place{{Rank: 0}}}, committed: true}
	n := &node{domains: map[uint64]*nodeDomain{1: g}}
	dom := wire.Domain{ID: 1, Generation: 1}
	cases := []wire.Control{
		{Cmd: wire.CmdStageFrom, Domain: dom, Offset: 1, NBytes: top},   // int(NBytes) was -1, and 1+(2^64-1) wraps to 0
		{Cmd: wire.CmdStageFrom, Domain: dom, Offset: 0, NBytes: p63},   // int(2^63) is negative
		{Cmd: wire.CmdStageFrom, Domain: dom, Offset: top, NBytes: 1},   // wraps to 0
		{Cmd: wire.CmdStageFrom, Domain: dom, Offset: p63, NBytes: p63}, // wraps to 0
		{Cmd: wire.CmdStageFrom, Domain: dom, Offset: 4096, NBytes: 1},
		{Cmd: wire.CmdStageTo, Domain: dom, Offset: top - 3, Data: make([]byte, 8)}, // wraps to 4
		{Cmd: wire.CmdStageTo, Domain: dom, Offset: 4089, Data: make([]byte, 8)},
	}
	for _, c := range cases {
		var r wire.ControlReply
		err := n.stage(c, &r)
		wantErrText(t, c.Cmd.String(), err, "overrun the 4096-byte window")
		if r.Data != nil {
			t.Errorf("%s at %#x: %d bytes of reply", c.Cmd, c.Offset, len(r.Data))
		}
	}
}

// fakeNode is a remote node on a host of its choosing that refuses every
// command: enough for the broker's checks before any command.
type fakeNode struct{ host hostid.ID }

func (n *fakeNode) Start(any, *engine.Handle, *engine.TaskArgs, *engine.CallConfig, func(error) func()) error {
	return engine.Errorf(engine.RuntimeError, "fake node")
}
func (n *fakeNode) Cancel(any, string) {}
func (n *fakeNode) Control(*wire.Control) (wire.ControlReply, error) {
	return wire.ControlReply{}, engine.Errorf(engine.RuntimeError, "fake node: sent a command")
}
func (n *fakeNode) ControlData(*wire.Control, []byte, []byte) (wire.ControlReply, func(), error) {
	return wire.ControlReply{}, func() {}, engine.Errorf(engine.RuntimeError, "fake node: sent a command")
}
func (n *fakeNode) Register(engine.Callable) error { return nil }
func (n *fakeNode) Lost() error                    { return nil }
func (n *fakeNode) Fail(error)                     {}
func (n *fakeNode) Host() hostid.ID                { return n.host }
func (n *fakeNode) Close()                         {}

// A sim global domain whose members live on different hosts is refused
// before any node is sent anything, naming the hosts and their nodes.
func TestSimGlobalDomainOnTwoHostsRefused(t *testing.T) {
	other := hostid.ID{Name: "node-b", Key: [32]byte{1}}
	hosts := map[int]hostid.ID{1: hostid.Local(), 2: other, 3: other}
	w := enginetest.Must(engine.NewWorker(engine.Config{Level: 4, Platform: sim(t), Dial: func(req engine.DialRequest) (engine.RemoteNode, error) {
		return &fakeNode{host: hosts[req.ID]}, nil
	}}))
	defer w.Close()
	local := enginetest.Must(engine.NewWorker(engine.Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0}}))
	enginetest.Must(w.AddWorker(local))
	for range 3 {
		enginetest.Must(w.AddRemoteWorker(engine.RemoteSpec{Endpoint: "127.0.0.1:7700", Platform: "a2a3sim", DeviceIDs: []int{0}, Token: []byte("0123456789abcdef")}))
	}
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Name: "g", Members: [][2]int{{0, 0}, {2, 0}, {1, 0}, {3, 0}}, WindowSize: 64}
	err := submitRun(t, w, func(o *engine.Orchestrator) error { _, err := Allocate(o, spec); return err })
	want := `allocate_global_domain: comm profile "sim" keeps a domain's windows in one host's shared memory, and its members live on hosts ` +
		hostid.Local().Name + " (nodes 0, 1) and node-b (nodes 2, 3)"
	if engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	// Members of one host pass this check (and go on to the nodes: the
	// fake one refuses its first command).
	spec.Members = [][2]int{{2, 0}, {3, 0}}
	err = submitRun(t, w, func(o *engine.Orchestrator) error { _, err := Allocate(o, spec); return err })
	if err == nil || strings.Contains(err.Error(), "one host's shared memory") || !strings.Contains(err.Error(), "fake node: sent a command") {
		t.Errorf("members of one host: %v", err)
	}
}
