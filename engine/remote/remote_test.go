package remote

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"simpler/engine"
	"simpler/hal/comm"
	"simpler/internal/enginetest"
	"simpler/internal/token"
	"simpler/wire"
)

// Remote tests run a real daemon on 127.0.0.1 in this process; its session
// processes are this test binary again (sessionEnv), serving the
// connection on fd 3 with the test kernels.
const sessionEnv = "SIMPLER_REMOTE_TEST_SESSION"

// sessionRaceEnv, set beside sessionEnv, starts the test session with a
// race detector, as a daemon run with --race does.
const sessionRaceEnv = "SIMPLER_REMOTE_TEST_SESSION_RACE"

// startDaemon serves sessions on a free loopback port until the test ends,
// with a token it writes where a client on this host finds it.
func startDaemon(t testing.TB, env ...string) (*Daemon, string) {
	return startDaemonConfig(t, DaemonConfig{}, env...)
}

// startDaemonConfig is startDaemon with cfg's bounds (its Token and
// Session are filled in, keeping a Session's Stdout and Stderr).
func startDaemonConfig(t testing.TB, cfg DaemonConfig, env ...string) (*Daemon, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	path, tok, err := token.Generate(ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	cfg.Token = tok
	output := cfg.Session // the test's Stdout and Stderr, if any
	cfg.Session = &engine.Launcher{Path: exe, Env: append([]string{sessionEnv + "=1"}, env...)}
	if output != nil {
		cfg.Session.Stdout, cfg.Session.Stderr = output.Stdout, output.Stderr
	}
	d, err := NewDaemon(ln, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Serve() }()
	t.Cleanup(func() {
		d.Close()
		token.Remove(path)
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	return d, ln.Addr().String()
}

// testNode is a node a test's worker dialled, as the test sees it: the
// node itself, for commands a real parent never sends, and the last
// export id it handed out (the Worker keeps an export's token opaque).
type testNode struct {
	*node
	exportMu sync.Mutex
	export   []byte

	// tamper, if set, may rewrite a command before it is sent, as a
	// misbehaving parent would, returning the command to send instead
	// (nil: send c as it is); the node's answer to every rewritten
	// command is appended to tampered.
	tamperMu sync.Mutex
	tamper   func(c *wire.Control) *wire.Control
	tampered []error
}

// setTamper installs f as n's tamper (nil removes it) and returns the
// answers to the commands the previous one rewrote.
func (n *testNode) setTamper(f func(c *wire.Control) *wire.Control) []error {
	n.tamperMu.Lock()
	defer n.tamperMu.Unlock()
	errs := n.tampered
	n.tamper, n.tampered = f, nil
	return errs
}

func (n *testNode) Control(c *wire.Control) (wire.ControlReply, error) {
	n.tamperMu.Lock()
	tamper := n.tamper
	n.tamperMu.Unlock()
	if tamper != nil {
		if bad := tamper(c); bad != nil {
			r, err := n.node.Control(bad)
			n.tamperMu.Lock()
			n.tampered = append(n.tampered, err)
			n.tamperMu.Unlock()
			return r, err
		}
	}
	r, err := n.node.Control(c)
	if err == nil && c.Cmd == wire.CmdExport {
		n.exportMu.Lock()
		n.export = r.Data
		n.exportMu.Unlock()
	}
	return r, err
}

// lastExport is the id of the last EXPORT n answered.
func (n *testNode) lastExport() []byte {
	n.exportMu.Lock()
	defer n.exportMu.Unlock()
	return n.export
}

// sentTasks is how many tasks n has sent and not had completed: the tasks
// on the wire.
func (n *testNode) sentTasks() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.tasks)
}

// dialled are the nodes each test worker dialled, by NEXT_LEVEL id.
var (
	dialledMu sync.Mutex
	dialled   = map[*engine.Worker]map[int]*testNode{}
)

// newParent is engine.NewWorker with this package's Dial, recording the
// nodes it dials for nodeOf.
func newParent(cfg engine.Config) (*engine.Worker, error) {
	nodes := map[int]*testNode{}
	cfg.Dial = func(req engine.DialRequest) (engine.RemoteNode, error) {
		n, err := dial(req)
		if err != nil {
			return nil, err
		}
		tn := &testNode{node: n}
		dialledMu.Lock()
		nodes[req.ID] = tn
		dialledMu.Unlock()
		return tn, nil
	}
	w, err := engine.NewWorker(cfg)
	if err == nil {
		dialledMu.Lock()
		dialled[w] = nodes
		dialledMu.Unlock()
	}
	return w, err
}

// nodeOf is remote node id of w, as w dialled it.
func nodeOf(w *engine.Worker, id int) *testNode {
	dialledMu.Lock()
	defer dialledMu.Unlock()
	return dialled[w][id]
}

// nodesOf are every remote node of w, by id.
func nodesOf(w *engine.Worker) []*testNode {
	var ns []*testNode
	for id := range w.NextCount() {
		if w.Nodes().IsRemote(id) {
			ns = append(ns, nodeOf(w, id))
		}
	}
	return ns
}

// remoteWorker makes an L4 worker over the given remote endpoints.
func remoteWorker(t *testing.T, endpoints ...string) *engine.Worker {
	t.Helper()
	w, err := newParent(engine.Config{Level: 4, Platform: sim(t), SessionTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range endpoints {
		if _, err := w.AddRemoteWorker(engine.RemoteSpec{Endpoint: ep, Platform: "a2a3sim", DeviceIDs: []int{0, 1}}); err != nil {
			t.Fatal(err)
		}
	}
	register(t, w, nodeOrch{procKernel{"node_add1"}})
	register(t, w, procKernel{"add1"})
	if err := w.Init(); err != nil {
		w.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return w
}

func TestRemoteNodeRunsTasksOnRemoteBuffers(t *testing.T) {
	_, addr := startDaemon(t)
	w := remoteWorker(t, addr)
	sp := newSpace(t)
	host, hb := hostI64(t, sp, 1)
	h := enginetest.Must(outside(w).Malloc(0, 8))
	put64(hb, 41)
	if err := outside(w).CopyTo(h, hb, 0); err != nil {
		t.Fatal(err)
	}
	node, _ := w.Registry().Lookup(nodeOrch{procKernel{"node_add1"}}.Digest())
	ref := remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: host.DType}, Ref: engine.RemoteRef{Buf: h}}
	mustRun(t, w, func(o *engine.Orchestrator) error {
		for i := 0; i < 2; i++ { // two increments ordered by the remote key
			if _, err := o.SubmitNext(node, mkArgs(ref, engine.InOut), nil, 0); err != nil {
				return err
			}
		}
		return nil
	})
	put64(hb, 0)
	if err := outside(w).CopyFrom(h, hb, 0); err != nil || get64(hb) != 43 {
		t.Fatalf("remote value %d (%v), want 43", get64(hb), err)
	}
	// Refusals, each before anything is sent.
	err := submitRun(t, w, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(node, mkArgs(host, engine.Input), nil, 0)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "takes RemoteTensorRef tensors") {
		t.Errorf("bare host tensor: %v", err)
	}
	out := engine.Tensor{Shape: []int{1}, DType: host.DType}
	err = submitRun(t, w, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(node, mkArgs(out, engine.Output), nil, 0)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "a remote OUTPUT needs a RemoteTensorRef") {
		t.Errorf("null remote OUTPUT: %v", err)
	}
	if err := outside(w).CopyTo(h, make([]byte, 16), 0); err == nil || !strings.Contains(err.Error(), "16 bytes at offset 0 run 8 bytes past the end of the 8-byte buffer") {
		t.Errorf("overrun copy: %v", err)
	}
	if err := Free(h); err != nil {
		t.Fatal(err)
	}
	if err := Free(h); err != nil {
		t.Errorf("second free: %v", err)
	}
	err = submitRun(t, w, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(node, mkArgs(ref, engine.Input), nil, 0)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "was released") {
		t.Errorf("released handle: %v", err)
	}
}

func TestRemoteExportImportAcrossNodes(t *testing.T) {
	_, a := startDaemon(t)
	_, b := startDaemon(t)
	w := remoteWorker(t, a, b)
	sp := newSpace(t)
	_, hb := hostI64(t, sp, 1)
	owner := enginetest.Must(outside(w).Malloc(0, 8))
	put64(hb, 7)
	if err := outside(w).CopyTo(owner, hb, 0); err != nil {
		t.Fatal(err)
	}
	exp := enginetest.Must(outside(w).Export(owner, 0, 8, engine.AccessRW))
	view := enginetest.Must(outside(w).Import(exp, 1, 0))
	if !view.Imported() || view.Worker != 1 || view.Owner != 0 {
		t.Fatalf("view %+v", view)
	}
	readOnly := enginetest.Must(outside(w).Import(exp, 1, engine.AccessRead))
	node, _ := w.Registry().Lookup(nodeOrch{procKernel{"node_add1"}}.Digest())
	t64 := engine.Tensor{Shape: []int{1}, DType: 7} // int64
	mustRun(t, w, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(node, mkArgs(remoteTensor{Tensor: engine.Tensor{Shape: t64.Shape, DType: t64.DType}, Ref: engine.RemoteRef{Buf: view}}, engine.InOut), nil, 1)
		return err
	})
	if err := outside(w).CopyFrom(owner, hb, 0); err != nil || get64(hb) != 8 {
		t.Fatalf("the owner sees %d (%v) after node 1 wrote through its import, want 8", get64(hb), err)
	}
	err := submitRun(t, w, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(node, mkArgs(remoteTensor{Tensor: engine.Tensor{Shape: t64.Shape, DType: t64.DType}, Ref: engine.RemoteRef{Buf: readOnly}}, engine.InOut), nil, 1)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "needs readwrite access; the handle has read") {
		t.Errorf("write through a read import: %v", err)
	}
	err = submitRun(t, w, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(node, mkArgs(remoteTensor{Tensor: engine.Tensor{Shape: t64.Shape, DType: t64.DType}, Ref: engine.RemoteRef{Buf: view}}, engine.InOut), nil, 0)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "usable on worker 1, not worker 0") {
		t.Errorf("an import used on the owner: %v", err)
	}
	// The owner free waits for the imports.
	if err := Free(owner); err != nil {
		t.Fatal(err)
	}
	if Freed(owner) {
		t.Fatal("the owner was freed while imports were live")
	}
	for _, v := range []*engine.RemoteBuffer{view, readOnly} {
		if err := ReleaseImport(v); err != nil {
			t.Fatal(err)
		}
	}
	if !Freed(owner) {
		t.Fatal("the owner free did not follow the last import release")
	}
}

func TestRemoteEndpointRefusals(t *testing.T) {
	w, err := newParent(engine.Config{Level: 4, Platform: sim(t), StartupTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, ep := range []string{"127.0.0.1", "127.0.0.1:http", "127.0.0.1:0", ":7700"} {
		if _, err := w.AddRemoteWorker(engine.RemoteSpec{Endpoint: ep, Platform: "a2a3sim", DeviceIDs: []int{0}}); engine.KindOf(err) != engine.ValueError {
			t.Errorf("endpoint %q: %v", ep, err)
		}
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	if _, err := w.AddRemoteWorker(engine.RemoteSpec{Endpoint: dead, Platform: "a2a3sim", DeviceIDs: []int{0}, Token: []byte("0123456789abcdef")}); err != nil {
		t.Fatal(err)
	}
	if err := w.Init(); err == nil || !strings.Contains(err.Error(), "cannot reach") {
		t.Fatalf("unreachable endpoint: %v", err)
	}
	// Without a token, the client looks for the one a daemon on this host
	// wrote for that port, and says where it looked.
	w2 := enginetest.Must(newParent(engine.Config{Level: 4, Platform: sim(t), StartupTimeout: 2 * time.Second}))
	defer w2.Close()
	enginetest.Must(w2.AddRemoteWorker(engine.RemoteSpec{Endpoint: dead, Platform: "a2a3sim", DeviceIDs: []int{0}}))
	if err := w2.Init(); err == nil || !strings.Contains(err.Error(), "no token for "+dead) || !strings.Contains(err.Error(), "looked in") {
		t.Fatalf("no token: %v", err)
	}
}

// sessionProcs are the daemon's session processes, for tests that stop or
// kill them.
func sessionProcs(d *Daemon) []*os.Process {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ps []*os.Process
	for _, s := range d.sessions {
		ps = append(ps, s.cmd.Process)
	}
	return ps
}

// A session process killed mid-task fails the run within the session
// timeout, with one task in flight or a full pipeline: the tasks sent fail
// with the lost connection, those still queued fail as they are routed to
// the dead node; close is clean.
func TestRemoteSessionKilledMidTask(t *testing.T) {
	for _, tasks := range []int{1, 3 * engine.RemoteDepth} {
		t.Run(fmt.Sprintf("tasks=%d", tasks), func(t *testing.T) { killMidTask(t, tasks) })
	}
}

func killMidTask(t *testing.T, tasks int) {
	d, addr := startDaemon(t)
	w := remoteWorker(t, addr)
	register(t, w, nodeOrch{procKernel{"node_hang"}})
	register(t, w, procKernel{"hang"})
	hang, _ := w.Registry().Lookup(nodeOrch{procKernel{"node_hang"}}.Digest())
	bufs := make([]*engine.RemoteBuffer, tasks)
	for i := range bufs {
		bufs[i] = enginetest.Must(outside(w).Malloc(0, 8))
	}
	r, err := w.Submit(asBuild(func(o *engine.Orchestrator) error {
		for _, h := range bufs {
			if _, err := o.SubmitNext(hang, mkArgs(remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: 7}, Ref: engine.RemoteRef{Buf: h}}, engine.OutputExisting), nil, 0); err != nil {
				return err
			}
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	sb := make([]byte, 8)
	poll(t, "the first kernel to start on the node", func() bool {
		return Watch(bufs[0], sb, 0) == nil && get64(sb) == 1
	})
	if n := nodeOf(w, 0).sentTasks(); n != min(tasks, engine.RemoteDepth) {
		t.Errorf("%d tasks on the wire, want %d", n, min(tasks, engine.RemoteDepth))
	}
	for _, p := range sessionProcs(d) {
		p.Kill()
	}
	err = r.Wait(10 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "remote_worker 0") || !strings.Contains(err.Error(), "connection to") {
		t.Fatalf("run error %v", err)
	}
	if !r.Done() { // its fence: every task retired
		t.Errorf("%d tasks, and not all of them completed", r.Tasks())
	}
}

// The daemon survives clients that break the protocol and serves the next
// session.
func TestDaemonSurvivesBadClients(t *testing.T) {
	_, addr := startDaemon(t)
	hdr := wire.EncodeHeader(wire.Header{Version: wire.ProtocolVersion})
	bad := [][]byte{
		[]byte("GET / HTTP/1.0\r\n\r\n"), // not a frame at all
		hdr[:10],                         // a truncated header
		nil,                              // connect and vanish
	}
	for _, b := range bad {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(b)
		c.Close()
	}
	// A proven HELLO that breaks a manifest rule is refused with a reason.
	r := rawHello(t, addr, defaultToken(t, addr), &wire.Hello{Version: wire.ProtocolVersion, Platform: "tpu", DeviceIDs: []int{0}, CommProfile: "sim"})
	if r.Accepted || !strings.Contains(r.Err.Message, "unknown platform") {
		t.Fatalf("refusal %+v", r)
	}
	// And a well-behaved parent still gets a session.
	w := remoteWorker(t, addr)
	if _, err := outside(w).Malloc(0, 8); err != nil {
		t.Fatal(err)
	}
}

func TestDaemonTokenProof(t *testing.T) {
	_, addr := startDaemon(t)
	spec := engine.RemoteSpec{Endpoint: addr, Platform: "a2a3sim", DeviceIDs: []int{0}, Token: []byte("wrong-but-long-enough")}
	w, _ := newParent(engine.Config{Level: 4, Platform: sim(t)})
	w.AddRemoteWorker(spec)
	if err := w.Init(); err == nil || !strings.Contains(err.Error(), "token proof does not match") {
		t.Fatalf("a wrong token: %v", err)
	}
	w.Close()
	spec.Token = defaultToken(t, addr)
	w, _ = newParent(engine.Config{Level: 4, Platform: sim(t)})
	w.AddRemoteWorker(spec)
	if err := w.Init(); err != nil {
		t.Fatalf("the right token: %v", err)
	}
	w.Close()
}

func TestRemoteRegisterAndUnregisterCommands(t *testing.T) {
	_, a := startDaemon(t)
	_, b := startDaemon(t)
	w := remoteWorker(t, a, b)
	// A callable no node can load is refused, naming the node, and is not
	// registered on the parent.
	if _, err := w.Registry().Register(procKernel{"no_such_kernel"}, nil); err == nil || !strings.Contains(err.Error(), "remote_worker 0") {
		t.Fatalf("register of an unknown callable: %v", err)
	}
	if _, ok := w.Registry().Lookup(procKernel{"no_such_kernel"}.Digest()); ok {
		t.Fatal("a refused callable stayed registered")
	}
	// UNREGISTER drops a callable on a node; a second time is refused.
	n := nodeOf(w, 1)
	digest := procKernel{"add1"}.Digest()
	if _, err := n.Control(&wire.Control{Cmd: wire.CmdUnregister, Digest: digest}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Control(&wire.Control{Cmd: wire.CmdUnregister, Digest: digest}); err == nil || !strings.Contains(err.Error(), "not registered on this node") {
		t.Fatalf("second unregister: %v", err)
	}
	// A buffer command naming a buffer the node never issued is refused.
	if _, err := n.Control(&wire.Control{Cmd: wire.CmdFree, Buffer: wire.BufferRef{ID: 99, Generation: 1}}); err == nil || !strings.Contains(err.Error(), "not an owned buffer") {
		t.Fatalf("free of an unknown buffer: %v", err)
	}
	if _, err := n.Control(&wire.Control{Cmd: wire.CmdImport, Token: []byte("garbage"), Access: wire.AccessRead}); err == nil || !strings.Contains(err.Error(), "malformed export id") {
		t.Fatalf("import of a bad token: %v", err)
	}
	// The node checks on its own what the parent checks first, so a
	// misbehaving parent cannot reach past a buffer either.
	own, _ := outside(w).Malloc(1, 16)
	ref := wire.BufferRef{ID: own.BufferID, Generation: own.Gen}
	refusals := []struct {
		c    wire.Control
		want string
	}{
		{wire.Control{Cmd: wire.CmdCopyTo, Buffer: ref, Offset: 8, Data: make([]byte, 16)}, "16 bytes at offset 8 run 8 bytes past the end of the 16-byte buffer"},
		{wire.Control{Cmd: wire.CmdCopyFrom, Buffer: ref, Offset: 0, NBytes: 17}, "17 bytes at offset 0 run 1 byte past the end of the 16-byte buffer"},
		{wire.Control{Cmd: wire.CmdCopyTo, Buffer: wire.BufferRef{ID: 77, Generation: 1}, Data: []byte{1}}, "not an owned buffer"},
		{wire.Control{Cmd: wire.CmdExport, Buffer: ref, Offset: 8, NBytes: 16, Access: wire.AccessRead}, "16 bytes at offset 8 run 8 bytes past the end of the 16-byte buffer"},
		{wire.Control{Cmd: wire.CmdReleaseImport, Buffer: ref}, "is not an imported buffer"},
		{wire.Control{Cmd: wire.CmdCommInit, Domain: wire.Domain{ID: 1, Generation: 1, Size: 1, Ranks: []wire.DomainRank{{Rank: 0, Worker: 9}},
			Table: wire.Payload(&wire.Topology{Cluster: 7, NodeRank: 0, Nodes: 1, Hash: "sha256:t", DeviceRanks: []uint32{9}})}}, "local worker 9 is not a chip of this node"},
		{wire.Control{Cmd: wire.CmdCommInit, Domain: wire.Domain{ID: 1, Generation: 1, Size: 1, Ranks: []wire.DomainRank{{Rank: 0, Worker: 0}}}}, "a malformed topology"},
		{wire.Control{Cmd: wire.CmdStageTo, Domain: wire.Domain{ID: 5, Generation: 1}, Rank: 0, Data: []byte{1}}, "no committed global domain 5 (generation 1) on this node"},
		{wire.Control{Cmd: wire.CmdImportTable, Domain: wire.Domain{ID: 5, Generation: 1, Table: make([]byte, comm.DescriptorSize)}}, "bad global domain descriptor"},
		{wire.Control{Cmd: wire.CmdCommit, Domain: wire.Domain{ID: 5, Generation: 1}}, "no global domain 5 on this node"},
	}
	for _, r := range refusals {
		if _, err := n.Control(&r.c); err == nil || !strings.Contains(err.Error(), r.want) {
			t.Errorf("%s: got %v, want %q", r.c.Cmd, err, r.want)
		}
	}
}

// An import whose reply never comes leaves its outcome unknown: the node
// may or may not hold the mapping. The node is then used for nothing more
// (imports, commands and tasks are refused at once, naming the cause), the
// owner's free still goes ahead on its own node, and close is clean; the
// session's process, once it runs again, sees the connection closed and
// ends, releasing what it held.
func TestUncertainImportRetiresTheNode(t *testing.T) {
	_, a := startDaemon(t)
	db, b := startDaemon(t)
	w, err := newParent(engine.Config{Level: 4, Platform: sim(t), SessionTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range []string{a, b} {
		enginetest.Must(w.AddRemoteWorker(engine.RemoteSpec{Endpoint: ep, Platform: "a2a3sim", DeviceIDs: []int{0}}))
	}
	register(t, w, nodeOrch{procKernel{"node_add1"}})
	register(t, w, procKernel{"add1"})
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	owner := enginetest.Must(outside(w).Malloc(0, 8))
	exp := enginetest.Must(outside(w).Export(owner, 0, 8, engine.AccessRW))
	stopped := sessionProcs(db)
	for _, p := range stopped {
		p.Signal(syscall.SIGSTOP) // node 1 stops answering
	}
	defer func() {
		for _, p := range stopped {
			p.Signal(syscall.SIGCONT)
		}
	}()
	for _, p := range stopped {
		waitStopped(t, p.Pid)
	}
	if _, err := outside(w).Import(exp, 1, 0); engine.KindOf(err) != engine.TimeoutError {
		t.Fatalf("import on a node that stopped answering: %v", err)
	}
	if _, err := outside(w).Import(exp, 1, 0); err == nil || !strings.Contains(err.Error(), "no reply to CONTROL") {
		t.Errorf("a second import on the retired node: %v", err)
	}
	node, _ := w.Registry().Lookup(nodeOrch{procKernel{"node_add1"}}.Digest())
	err = submitRun(t, w, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(node, mkArgs(remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: 7}, Ref: engine.RemoteRef{Inline: make([]byte, 8)}}, engine.Input), nil, 1)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "remote_worker 1 can take no more work") {
		t.Errorf("a task for the retired node: %v", err)
	}
	if err := Free(owner); err != nil || !Freed(owner) {
		t.Errorf("owner free on the live node: %v (freed %v)", err, Freed(owner))
	}
	mustRun(t, w, func(o *engine.Orchestrator) error { // node 0 still works
		_, err := o.SubmitNext(node, mkArgs(remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: 7}, Ref: engine.RemoteRef{Inline: make([]byte, 8)}}, engine.Input), nil, 0)
		return err
	})
	if err := w.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

// defaultToken is the token the daemon at addr wrote for clients on this
// host.
func defaultToken(t testing.TB, addr string) []byte {
	t.Helper()
	tok, err := token.ForEndpoint(addr)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// rawHello runs the handshake by hand with hello (its proof made from tok,
// its parent 1 unless set) and returns the daemon's HELLO_REPLY.
func rawHello(t testing.TB, addr string, tok []byte, hello *wire.Hello) wire.HelloReply {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	_, p, err := wire.ReadFrame(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := wire.DecodeChallenge(p)
	if err != nil {
		t.Fatal(err)
	}
	if hello.Parent == 0 {
		hello.Parent = 1
	}
	const session = 9
	hello.Proof = wire.Prove(tok, ch.Nonce, session, hello.Parent)
	wire.WriteFrame(c, wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeHello, Session: session}, wire.Payload(hello))
	h, payload, err := wire.ReadFrame(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := wire.DecodeHelloReply(payload)
	if err != nil || h.Type != wire.TypeHelloReply {
		t.Fatalf("reply %s %+v %v", h.Type, r, err)
	}
	return r
}

// waitStopped polls until pid, sent SIGSTOP, is stopped: a stop takes
// effect asynchronously, and the process may run on meanwhile.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	poll(t, "the process to stop", func() bool {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		_, after, _ := strings.Cut(string(stat), ") ")
		return err == nil && strings.HasPrefix(after, "T")
	})
}
