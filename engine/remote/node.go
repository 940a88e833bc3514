// Package remote is the TCP transport of remote level-3 nodes: the
// parent's side of a session (Dial, the node a level-4 Worker drives
// through engine.RemoteNode), the parent's remote buffers (a role of the
// Worker: DirectIn, Free, ReleaseImport), and the daemon's (Daemon, its session
// processes, their remote buffers and exports, the links between them and
// to peer daemons, the proof gate). It imports engine, wire and the
// packages below them; engine never imports it: starlib and the CLI set
// engine.Config.Dial to Dial and run the daemon. docs/protocol.md has the
// bytes, docs/security.md the threat model.
package remote

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"simpler/engine"
	"simpler/internal/hostid"
	"simpler/internal/lockorder"
	"simpler/internal/netspin"
	"simpler/internal/token"
	"simpler/wire"
)

// node is the parent's side of one remote session: an ordered command
// lane (one command in flight), tasks, and health probes, multiplexed on
// one connection by sequence number. It is the engine.RemoteNode a
// level-4 Worker drives.
type node struct {
	name    string
	who     string             // "node 1", "rank 0": who it is in the lines it prints and in RemoteRaces
	tag     string             // "[node 1] ", "[rank 0] ": what the lines it prints are tagged with
	events  func(engine.Event) // the Worker's observer of what the node did (nil: none)
	id      int
	spec    engine.RemoteSpec
	conn    net.Conn
	in      io.Reader       // conn, read spinning briefly before blocking
	spin    *netspin.Reader // in's spinning, while a reply is due
	heard   *heardReader    // in, noting when bytes last arrived (the health watch)
	probing atomic.Bool     // a HEALTH is being written
	session uint64
	timeout time.Duration
	host    hostid.ID // where the node runs, from its HELLO_REPLY

	wmu    sync.Mutex // frames written
	cmdMu  sync.Mutex // the command lane: one command in flight
	mu     sync.Mutex
	seq    uint64
	wait   map[uint64]chan rreply
	tasks  map[uint64]taskDone // tasks sent and not completed, by sequence
	seqOf  map[any]uint64      // the sequence of each of those, by task member's key (cancel)
	sinks  map[uint64][]byte   // where a COPY_FROM reply's data goes, by sequence
	big    chan []byte         // the reusable buffer for large replies, while not in use
	dead   error
	gone   chan struct{}  // closed when the connection is lost
	reader sync.WaitGroup // the reader, the health monitor and failure callbacks
}

// taskDone is called with a task's outcome on the goroutine that read its
// COMPLETION. It must not wait for another reply from the node; work that
// might is returned as after, which runs once reading has passed to a new
// goroutine.
type taskDone func(err error) (after func())

type rreply struct {
	h       wire.Header
	payload []byte
	done    func() // the waiter calls it once it is finished with payload
	sunk    bool   // a COPY_FROM whose data went straight into the waiter's sink
}

// Dial is the engine.Dialer of remote nodes (engine.Config.Dial): it
// connects to the daemon, proves the token on behalf of req.Parent (the
// level-4 worker's id), brings the node up and ships it the code.
func Dial(req engine.DialRequest) (engine.RemoteNode, error) {
	n, err := dial(req)
	if err != nil {
		return nil, err // not a nil *node inside a non-nil interface
	}
	return n, nil
}

func dial(req engine.DialRequest) (*node, error) {
	name, spec, deadline := req.Name, req.Spec, req.Deadline
	if spec.Token == nil {
		tok, err := token.ForEndpoint(spec.Endpoint)
		if err != nil {
			return nil, engine.Wrap(err, name)
		}
		spec.Token = tok
	}
	conn, err := net.DialTimeout("tcp", spec.Endpoint, time.Until(deadline))
	if err != nil {
		return nil, engine.Errorf(engine.RuntimeError, "%s: cannot reach %s: %v", name, spec.Endpoint, errors.Unwrap(err))
	}
	req.Spec = spec
	return attach(conn, req, nil, fmt.Sprintf("node %d", req.ID))
}

// attach brings up the node on conn: the HELLO (its proof over the
// daemon's CHALLENGE, read here, or over a rank's JOIN nonce when the
// rank dialled this worker), then the reader, the health monitor and the
// code. The lines the node prints are tagged with who ("node 1", "rank
// 0"). On failure conn is closed.
func attach(conn net.Conn, req engine.DialRequest, joinNonce *[32]byte, who string) (*node, error) {
	n := &node{name: req.Name, who: who, tag: "[" + who + "] ", events: req.Events, id: req.ID, spec: req.Spec, conn: conn, timeout: req.Timeout, wait: map[uint64]chan rreply{}, tasks: map[uint64]taskDone{}, seqOf: map[any]uint64{}, sinks: map[uint64][]byte{}, gone: make(chan struct{}), big: make(chan []byte, 1)}
	n.big <- nil
	n.session = randomID()
	where := fmt.Sprintf("%s at %s", n.name, n.spec.Endpoint)
	if err := n.hello(req.Parent, req.Deadline, joinNonce); err != nil {
		conn.Close()
		return nil, engine.Wrap(err, where)
	}
	n.spin = netspin.NewReader(conn, netspin.DefaultSpin)
	n.spin.SpinWhileDue(n.replyDue)
	n.heard = newHeardReader(n.spin)
	n.in = n.heard
	n.reader.Add(2)
	go n.read()
	go n.monitor()
	b := &wire.Control{Cmd: wire.CmdBundle}
	if src := req.Sources; src != nil {
		b.Bundle = wire.Bundle{Root: src.Root, Modules: src.Modules}
	}
	if _, err := n.Control(b); err != nil {
		n.Close()
		return nil, engine.Wrap(err, where+": shipping the code")
	}
	return n, nil
}

// hello proves the token and asks for the node: over the daemon's
// CHALLENGE, or over joinNonce when a rank dialled in (its JOIN, already
// read, carried it).
func (n *node) hello(parent uint64, deadline time.Time, joinNonce *[32]byte) error {
	n.conn.SetDeadline(deadline)
	defer n.conn.SetDeadline(time.Time{})
	var nonce [32]byte
	if joinNonce != nil {
		nonce = *joinNonce
	} else {
		h, payload, err := wire.ReadFrame(n.conn, wire.TypeChallenge.MaxPayload())
		if err != nil {
			return handshakeError("no challenge from the daemon", err)
		}
		if h.Type != wire.TypeChallenge {
			return engine.Errorf(engine.RuntimeError, "the daemon opened with %s, want CHALLENGE", h.Type)
		}
		ch, err := wire.DecodeChallenge(payload)
		if err != nil {
			return err
		}
		nonce = ch.Nonce
	}
	hello := &wire.Hello{Version: wire.ProtocolVersion, Parent: parent, Platform: n.spec.Platform, DeviceIDs: n.spec.DeviceIDs,
		NumSubWorkers: n.spec.NumSubWorkers, CommProfile: n.spec.CommProfile, GlobalDeviceRanks: n.spec.GlobalDeviceRanks,
		Proof: wire.Prove(n.spec.Token, nonce, n.session, parent)}
	if err := n.send(wire.TypeHello, 0, hello); err != nil {
		return err
	}
	h, payload, err := wire.ReadFrame(n.conn, wire.TypeHelloReply.MaxPayload())
	if err != nil {
		return handshakeError("no reply to HELLO", err)
	}
	if h.Type != wire.TypeHelloReply {
		return engine.Errorf(engine.RuntimeError, "the daemon answered HELLO with %s", h.Type)
	}
	r, err := wire.DecodeHelloReply(payload)
	switch {
	case err != nil:
		return err
	case !r.Accepted:
		return &engine.Error{Kind: engine.Kind(r.Err.Kind), Msg: "the daemon refused the session: " + r.Err.Message}
	case r.Session != n.session || r.Worker != uint32(n.id):
		return engine.Errorf(engine.RuntimeError, "READY for session %#x worker %d, want %#x worker %d", r.Session, r.Worker, n.session, n.id)
	case r.Version != wire.ProtocolVersion:
		return engine.Errorf(engine.RuntimeError, "the daemon speaks protocol %d, this parent %d", r.Version, wire.ProtocolVersion)
	case r.CommProfile != n.spec.CommProfile:
		return engine.Errorf(engine.RuntimeError, "the daemon runs comm profile %q, want %q", r.CommProfile, n.spec.CommProfile)
	}
	n.host = hostid.ID{Name: r.Host.Name, Key: r.Host.Key}
	return nil
}

// Host is where the node runs, as its HELLO_REPLY said.
func (n *node) Host() hostid.ID { return n.host }

// handshakeError is a failed handshake read: a TimeoutError when the
// start-up deadline passed (a stopped daemon, say), else a RuntimeError.
func handshakeError(what string, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return engine.Errorf(engine.TimeoutError, "%s within the startup deadline", what)
	}
	return engine.Errorf(engine.RuntimeError, "%s: %v", what, err)
}

func (n *node) send(t wire.Type, seq uint64, m wire.Message) error {
	return n.sendBulk(t, seq, m, nil)
}

// sendBulk sends m, followed by bulk as its trailing blob when bulk is
// not nil (a COPY_TO: the data is written from where it lies).
func (n *node) sendBulk(t wire.Type, seq uint64, m wire.Message, bulk []byte) error {
	lockorder.IO("a frame to a remote node")
	h := wire.Header{Version: wire.ProtocolVersion, Type: t, Session: n.session, Worker: uint32(n.id), Seq: seq}
	n.wmu.Lock()
	err := wire.WriteMessage(n.conn, h, m, bulk)
	n.wmu.Unlock()
	if n.spin != nil {
		n.spin.Due() // a request's reply, or a task's completion, may be due now
	}
	return err
}

// replyDue reports whether a reply or a task's completion is awaited: the
// reader spins only then.
func (n *node) replyDue() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.wait)+len(n.tasks) > 0
}

// read routes replies to their waiters and completions to their tasks
// until the connection ends, or until a completion's after-work needs the
// node: then a new goroutine reads and this one does that work.
func (n *node) read() {
	defer n.reader.Done()
	for {
		h, err := wire.ReadHeader(n.in, wire.MaxPayload)
		var r rreply
		if err == nil {
			r, err = n.readReply(h)
		}
		if err == nil && h.Type == wire.TypeShutdown {
			err = errors.New("the daemon ended the session")
		}
		if err == nil && (h.Session != n.session || h.Worker != uint32(n.id)) {
			err = fmt.Errorf("a frame for session %#x worker %d on this session", h.Session, h.Worker)
		}
		if err == nil && h.Type == wire.TypeOutput {
			if err = printed(n.tag, r.payload); err == nil {
				r.done()
				continue
			}
			err = fmt.Errorf("bad OUTPUT: %v", err)
		}
		if err != nil {
			n.Fail(engine.Errorf(engine.RuntimeError, "%s: connection to %s lost: %v", n.name, n.spec.Endpoint, err))
			return
		}
		n.mu.Lock()
		ch := n.wait[h.Seq]
		delete(n.wait, h.Seq)
		delete(n.sinks, h.Seq)
		done := n.tasks[h.Seq]
		delete(n.tasks, h.Seq)
		if done != nil {
			for k, q := range n.seqOf {
				if q == h.Seq {
					delete(n.seqOf, k)
					break
				}
			}
		}
		n.mu.Unlock()
		switch {
		case done != nil:
			err := n.completion(r)
			if after := done(err); after != nil {
				n.reader.Add(1)
				go n.read()
				after()
				return
			}
		case ch != nil:
			ch <- r
		default:
			r.done()
		}
	}
}

// readReply reads one reply's payload. A COPY_FROM reply whose waiter
// left a sink of the right size is read straight into it (the data crosses
// this process once); other large payloads go into the reused buffer.
func (n *node) readReply(h wire.Header) (rreply, error) {
	r := rreply{h: h, done: func() {}}
	if int(h.Length) <= bigFrame {
		p, err := wire.ReadPayload(n.in, h, nil)
		r.payload = p
		return r, err
	}
	if h.Type == wire.TypeControlReply {
		prefix := make([]byte, wire.CopyFromReplyPrefixSize)
		if _, err := io.ReadFull(n.in, prefix); err != nil {
			return r, err
		}
		seq, size, ok := wire.DecodeCopyFromReplyPrefix(prefix, int(h.Length))
		n.mu.Lock()
		sink := n.sinks[seq]
		n.mu.Unlock()
		if ok && seq == h.Seq && len(sink) == size {
			_, err := io.ReadFull(n.in, sink)
			r.sunk = true
			return r, err
		}
		p := append(make([]byte, 0, int(h.Length)), prefix...) // the rest is read after it, not copied
		_, err := io.ReadFull(n.in, p[len(p):h.Length])
		r.payload = p[:h.Length]
		return r, err
	}
	buf := <-n.big
	p, err := wire.ReadPayload(n.in, h, buf)
	if err != nil {
		n.big <- buf
		return r, err
	}
	r.payload, r.done = p, func() { n.big <- p[:cap(p)] }
	return r, nil
}

// bigFrame is the payload size above which replies use the reused buffer.
const bigFrame = 1 << 20

// Fail marks the node dead: every waiter gets err, and so does every task
// in flight (on a goroutine of its own: Fail may be called by one that
// holds what a completion needs).
func (n *node) Fail(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dead != nil {
		return
	}
	n.dead = err
	close(n.gone)
	n.conn.Close()
	tasks := n.tasks
	n.tasks = map[uint64]taskDone{}
	if len(tasks) == 0 {
		return
	}
	n.reader.Add(1)
	go func() {
		defer n.reader.Done()
		for _, done := range tasks {
			if after := done(err); after != nil {
				after()
			}
		}
	}()
}

// Lost reports why the node can take no more work: its connection failed
// or a reply did not come in time (nil while it is usable). A session
// whose outcome for a command is unknown is never used again, so no import
// or buffer can be left half-known on a node that is still in use; its
// process ends when the connection closes, releasing what it held.
func (n *node) Lost() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dead
}

// monitor watches the node's health while tasks are in flight
// (healthWatch): a long task never looks dead, and a node silent for the
// timeout is failed then, not a probe interval later.
func (n *node) monitor() {
	defer n.reader.Done()
	w := newHealthWatch(n.timeout)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-n.gone:
			return
		case <-timer.C:
		}
		n.mu.Lock()
		busy := len(n.tasks) > 0
		n.mu.Unlock()
		act, wait := w.step(n.heard.now(), n.heard.heard(), busy)
		switch act {
		case healthProbe:
			n.probe()
		case healthDead:
			n.Fail(engine.Errorf(engine.TimeoutError, "%s: no answer within remote_session_timeout_s=%v while it ran tasks (health probes went unanswered)", n.name, n.timeout.Seconds()))
			return
		}
		timer.Reset(wait)
	}
}

// probe sends a HEALTH and does not wait for its reply: the reply, like
// any bytes from the node, counts as hearing from it. One probe is
// written at a time, on a goroutine of its own, so a write that blocks on
// a node that does not read never holds up the watch; Fail closing the
// connection ends it.
func (n *node) probe() {
	if !n.probing.CompareAndSwap(false, true) {
		return
	}
	n.mu.Lock()
	if n.dead != nil {
		n.mu.Unlock()
		n.probing.Store(false)
		return
	}
	n.seq++
	seq := n.seq
	n.reader.Add(1)
	n.mu.Unlock()
	go func() {
		defer n.reader.Done()
		defer n.probing.Store(false)
		n.send(wire.TypeHealth, seq, &wire.Health{Timestamp: time.Now().UnixNano()})
	}()
}

// requestBulk sends a frame, with bulk data after m if bulk is not nil,
// and waits at most the session timeout for the reply with its sequence
// (its data into sink, if not nil).
func (n *node) requestBulk(t wire.Type, m wire.Message, bulk, sink []byte) (rreply, error) {
	lockorder.IO("a request to a remote node")
	ch := make(chan rreply, 1)
	n.mu.Lock()
	if n.dead != nil {
		n.mu.Unlock()
		return rreply{}, n.dead
	}
	n.seq++
	seq := n.seq
	n.wait[seq] = ch
	if sink != nil {
		n.sinks[seq] = sink
	}
	n.mu.Unlock()
	if err := n.sendBulk(t, seq, m, bulk); err != nil {
		n.Fail(engine.Errorf(engine.RuntimeError, "%s: sending %s: %v", n.name, t, err))
		return rreply{}, n.dead
	}
	timer := time.NewTimer(n.timeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r, nil
	case <-n.gone:
		return rreply{}, n.dead
	case <-timer.C:
		n.Fail(engine.Errorf(engine.TimeoutError, "%s: no reply to %s within remote_session_timeout_s=%v", n.name, t, n.timeout.Seconds()))
		return rreply{}, n.dead
	}
}

// Control runs one command on the ordered command lane; the reply's data
// is the caller's (a copy).
func (n *node) Control(c *wire.Control) (wire.ControlReply, error) {
	reply, done, err := n.ControlData(c, nil, nil)
	if err == nil {
		reply.Data = append([]byte(nil), reply.Data...)
	}
	done()
	return reply, err
}

// ControlData runs a command whose request may carry bulk data and whose
// reply data is used in place until the returned release is called (the
// caller must call it), or was read into sink (then the reply's Data is
// sink).
func (n *node) ControlData(c *wire.Control, bulk, sink []byte) (wire.ControlReply, func(), error) {
	n.cmdMu.Lock()
	defer n.cmdMu.Unlock()
	defer n.reportCopy(c, bulk, sink, time.Now())
	r, err := n.requestBulk(wire.TypeControl, c, bulk, sink)
	if err != nil {
		return wire.ControlReply{}, func() {}, err
	}
	if r.sunk {
		return wire.ControlReply{Seq: r.h.Seq, Cmd: c.Cmd, Data: sink}, func() {}, nil
	}
	reply, err := wire.DecodeControlReply(r.payload)
	if err != nil {
		r.done()
		n.Fail(engine.Errorf(engine.RuntimeError, "%s: bad CONTROL_REPLY: %v", n.name, err))
		return reply, func() {}, n.dead
	}
	if reply.Err != nil {
		r.done()
		return reply, func() {}, &engine.Error{Kind: engine.Kind(reply.Err.Kind), Msg: reply.Err.Message}
	}
	return reply, r.done, nil
}

// Start sends a TASK; done gets its outcome when the COMPLETION arrives
// or the node fails. Tasks run on the node in the order they are sent. An
// error means the task was not sent and done will not be called.
func (n *node) Start(key any, h *engine.Handle, args *engine.TaskArgs, cfg *engine.CallConfig, done func(error) (after func())) error {
	t := &wire.Task{Digest: h.Digest(), Config: cfg.Wire(), Scalars: args.Scalars}
	for i, ten := range args.Tensors {
		ta := wire.TensorArg{Tag: wire.Tag(args.Tags[i]), DType: ten.DType, Shape: ten.Shape}
		var ref engine.RemoteRef
		if i < len(args.Remote) {
			ref = args.Remote[i]
		}
		switch {
		case ref.Buf != nil:
			b := ref.Buf
			local := wire.BufferRef{ID: b.BufferID, Generation: b.Gen}
			if b.Imported() { // the importer knows the view by its own ref
				local = wire.BufferRef{ID: b.ImportID, Generation: 1}
			}
			ta.Remote = &wire.RemoteRef{Owner: uint32(b.Owner), Buffer: local, Offset: uint64(ref.Offset), Access: args.Tags[i].Needs()}
		case ref.Inline != nil:
			ta.Inline = ref.Inline
		default:
			return engine.Errorf(engine.ValueError, "tensor %d: a host tensor cannot reach a remote node; use a RemoteTensorRef", i)
		}
		t.Tensors = append(t.Tensors, ta)
	}
	n.mu.Lock()
	if n.dead != nil {
		n.mu.Unlock()
		return n.dead
	}
	n.seq++
	seq := n.seq
	n.tasks[seq] = done
	n.seqOf[key] = seq
	n.mu.Unlock()
	if err := n.send(wire.TypeTask, seq, t); err != nil {
		n.mu.Lock()
		delete(n.tasks, seq)
		delete(n.seqOf, key)
		n.mu.Unlock()
		n.Fail(engine.Errorf(engine.RuntimeError, "%s: sending %s: %v", n.name, wire.TypeTask, err))
		return n.dead
	}
	return nil
}

// completion decodes a task's COMPLETION into its error: a task the
// daemon did not start is one that Is engine.ErrNotStarted.
func (n *node) completion(r rreply) error {
	defer r.done()
	if r.h.Type != wire.TypeCompletion {
		n.Fail(engine.Errorf(engine.RuntimeError, "%s: a %s answered TASK", n.name, r.h.Type))
		return n.dead
	}
	c, err := wire.DecodeCompletion(r.payload)
	if err != nil {
		n.Fail(engine.Errorf(engine.RuntimeError, "%s: bad COMPLETION: %v", n.name, err))
		return n.dead
	}
	n.reportSpans(c)
	n.noteRaces(c.Race)
	if c.Err == nil {
		return nil
	}
	inner := &engine.Error{Kind: engine.Kind(c.Err.Kind), Msg: c.Err.Message}
	if c.Err.NotStarted {
		inner.Cause = engine.ErrNotStarted // the parent counts it as not started (a cancel's report)
	}
	if c.Err.Path == "" {
		return inner
	}
	return &engine.TaskError{TaskID: int(c.Err.TaskID), Worker: c.Err.Path, Callable: c.Err.Callable, Err: inner}
}

// Register ships a callable by module and name.
func (n *node) Register(c engine.Callable) error {
	loc, ok := c.(engine.Locatable)
	if !ok {
		return engine.Errorf(engine.ValueError, "%q cannot be sent to a remote node: it has no module to load it from", c.Name())
	}
	_, err := n.Control(&wire.Control{Cmd: wire.CmdRegister, Digest: c.Digest(), Module: loc.Module(), Name: c.Name()})
	return engine.Wrap(err, n.name)
}

// Close ends the session: SHUTDOWN, then the connection.
func (n *node) Close() {
	n.send(wire.TypeShutdown, 0, &wire.Shutdown{Reason: "closed"})
	n.Fail(engine.Errorf(engine.RuntimeError, "%s: session closed", n.name))
	n.reader.Wait()
}

// killGrace is engine's grace for a child process asked to stop a task
// (its killGrace); a node gets twice that before it is retired.
const killGrace = time.Second

// Cancel asks the node to stop a task member it runs or has queued, and
// retires the whole session if the member has not come back within twice
// killGrace: a node whose kernel will not stop is ended, not waited for.
// It does not wait.
func (n *node) Cancel(key any, reason string) {
	n.mu.Lock()
	seq, ok := n.seqOf[key]
	n.mu.Unlock()
	if !ok {
		return
	}
	n.reader.Add(1)
	go func() {
		defer n.reader.Done()
		n.Control(&wire.Control{Cmd: wire.CmdCancel, TaskSeq: seq})
		deadline := time.Now().Add(2 * killGrace)
		for time.Now().Before(deadline) {
			n.mu.Lock()
			_, running := n.tasks[seq]
			n.mu.Unlock()
			if !running {
				return
			}
			select {
			case <-n.gone:
				return
			case <-time.After(10 * time.Millisecond): // polling the completion map
			}
		}
		n.Fail(engine.Errorf(engine.RuntimeError, "%s: the node did not stop a task within %v of being asked to (%s); the session is ended", n.name, 2*killGrace, reason))
	}()
}
