package remote

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/hal/dtype"
	"simpler/hal/shm"
	"simpler/internal/bounds"
	"simpler/internal/hostid"
	"simpler/internal/netspin"
	"simpler/kind"
	"simpler/wire"
)

// SourceResolver makes a resolver from the module bundle a parent ships
// (a remote node has no copy of the parent's files); module top-level code
// runs under loadSteps Starlark steps. A resolver that also has a
// Cancel(reason string) method has its loads cancelled when the parent
// disconnects.
type SourceResolver func(b wire.Bundle, loadSteps uint64) (engine.Resolver, error)

// session is one remote L3 node as its daemon runs it: the connection to
// the parent, an inner level-3 Worker, the remote buffers it owns and the
// imports it holds. It runs in a process of its own, within the limits its
// daemon set.
type session struct {
	conn        net.Conn
	in          io.Reader // conn, read spinning briefly before blocking
	id          uint64
	worker      uint32
	daemon      uint64 // the daemon's id and its number for this session: export ids name both
	slot        uint64
	parent      uint64 // the parent's id from its HELLO: exports are bound to it
	limits      wire.Limits
	link        *link
	inner       *engine.Worker
	newResolver SourceResolver
	onLost      func() // the parent went away without a SHUTDOWN

	wmu      sync.Mutex  // serialises frames written
	big      chan []byte // the reusable buffer for large frames (COPY_TO data)
	bigFrame int         // payloads above this go to big, or straight to their buffer (bigFrame; less in the fuzzer)

	mu          sync.Mutex
	resolve     engine.Resolver // set by BUNDLE
	callables   map[string]engine.Callable
	bufs        map[wire.BufferRef]*sbuf // owned and imported, by the ref handed out
	bufSeq      uint64
	owned       uint64            // bytes of owned buffers and global windows: limits.BufferBytes bounds it
	windows     map[uint64]uint64 // a global domain's window bytes here, by domain id
	exports     map[[16]byte]export
	grants      map[uint64]chan grant // imports waiting for the daemon, by request
	linkSeq     uint64
	inflight    int     // tasks received and not yet completed
	running     bool    // a goroutine is running tasks
	queued      []frame // tasks read while one runs, in arrival order
	queuedBytes uint64
	curSeq      uint64         // the task running now (0: none)
	gone        bool           // the parent went away: queued tasks are dropped
	taskStop    engine.Stopper // stops it (CANCEL)
	// reader names the goroutine holding the reading role (read's role);
	// readerBusy says it is running a command or tasks, and workSeq
	// counts finished work, so the watchdog sees work that spans a tick.
	reader     uint64
	readerBusy bool
	workSeq    uint64

	readEnd  chan error     // the reading role ended: why
	readers  sync.WaitGroup // goroutines reading, working or watching
	linkDone chan struct{}  // closed when serveLink returns
}

// sbuf is a remote buffer as its session holds it: owned memory (a
// shared-memory object of this process) or an imported view of another
// session's.
type sbuf struct {
	seg      *shm.Segment
	off, len int
	access   wire.Access
	owned    bool
}

func (b *sbuf) bytes() []byte { return b.seg.Mem[b.off : b.off+b.len] }

// export is one EXPORT as its owner records it: the id handed out names
// this record, and an import learns the range and access only from here.
type export struct {
	ref    wire.BufferRef
	off, n uint64
	access wire.Access
}

// maxExports bounds one session's export table.
const maxExports = 1 << 16

// runSession serves one session on conn, authenticated by the daemon that
// sent start over l, until the parent shuts it down or goes away; onLost
// is called when the parent goes away without a SHUTDOWN.
func runSession(conn net.Conn, l *link, start wire.Link, newResolver SourceResolver, onLost func()) error {
	s := newSession(conn, l, start, newResolver, onLost)
	defer s.close()
	if err := s.handshake(start.Hello); err != nil {
		return err
	}
	s.in = netspin.NewReader(conn, netspin.DefaultSpin)
	return s.serve()
}

// newSession makes the session start describes; its link is served from
// now until close.
func newSession(conn net.Conn, l *link, start wire.Link, newResolver SourceResolver, onLost func()) *session {
	s := &session{conn: conn, link: l, id: start.Session, worker: start.Worker, daemon: start.Daemon, slot: start.Slot, limits: start.Limits,
		newResolver: newResolver, onLost: onLost, callables: map[string]engine.Callable{}, bufs: map[wire.BufferRef]*sbuf{},
		windows: map[uint64]uint64{}, exports: map[[16]byte]export{}, grants: map[uint64]chan grant{}, big: make(chan []byte, 1), bigFrame: bigFrame,
		linkDone: make(chan struct{})}
	s.big <- nil
	go s.serveLink()
	return s
}

func (s *session) write(t wire.Type, seq uint64, m wire.Message) error {
	return s.writeBulk(t, seq, m, nil)
}

// writeBulk writes m with bulk as its trailing blob when bulk is not nil.
func (s *session) writeBulk(t wire.Type, seq uint64, m wire.Message, bulk []byte) error {
	h := wire.Header{Version: wire.ProtocolVersion, Type: t, Session: s.id, Worker: s.worker, Seq: seq}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return wire.WriteMessage(s.conn, h, m, bulk)
}

// handshake answers the HELLO the daemon checked: the node is brought up
// from its manifest and HELLO_REPLY says whether it is READY.
func (s *session) handshake(payload []byte) error {
	hello, err := wire.DecodeHello(payload)
	if err == nil {
		s.parent = hello.Parent
		err = s.accept(hello)
	}
	local := hostid.Local()
	reply := &wire.HelloReply{Accepted: err == nil, Session: s.id, Worker: s.worker, Version: wire.ProtocolVersion, CommProfile: hello.CommProfile,
		Host: wire.Host{Name: local.Name, Key: local.Key}}
	if hello.CommProfile == "" {
		reply.CommProfile = "sim"
	}
	if err != nil {
		reply.Err = errBody(err)
	}
	s.conn.SetWriteDeadline(time.Now().Add(HelloTimeout))
	defer s.conn.SetWriteDeadline(time.Time{})
	if werr := s.write(wire.TypeHelloReply, 0, reply); werr != nil && err == nil {
		err = werr
	}
	return err
}

// accept checks the parent's manifest and brings the node up.
func (s *session) accept(hello wire.Hello) error {
	p, err := hal.Lookup(hello.Platform)
	if err != nil {
		return err
	}
	if err := p.Serves(hello.CommProfile); err != nil {
		return engine.Wrap(err, "HELLO")
	}
	s.inner, err = engine.NewWorker(engine.Config{Level: 3, Platform: p, DeviceIDs: hello.DeviceIDs, NumSubWorkers: hello.NumSubWorkers,
		CommProfile: hello.CommProfile, GlobalDeviceRanks: hello.GlobalDeviceRanks})
	if err != nil {
		return err
	}
	return s.inner.Init()
}

// serve reads frames: HEALTH is answered as soon as it is read, never
// queued behind work; CONTROL commands run in order (the parent sends one
// at a time); TASKs run one after another.
//
// A command or task runs on the goroutine that read it: waking another
// goroutine costs more than a small command does, so the work starts
// without a hand-off and its reply goes out from where it ran. Frames must
// still be read while long work runs (health probes, the next tasks), so a
// watchdog hands the reading role to a new goroutine once one piece of
// work has run for a whole tick; tasks read meanwhile queue for the
// goroutine running tasks.
func (s *session) serve() error {
	s.readEnd = make(chan error, 1)
	stop := make(chan struct{})
	s.readers.Add(2)
	go s.watchdog(stop)
	go s.read(0)
	err := <-s.readEnd
	close(stop)
	if err != nil {
		s.lost()
	}
	s.readers.Wait() // work in hand and queued tasks finish before the session closes
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return nil // the parent went away, or abandon closed the connection
	}
	return err
}

// lost stops what the session runs for a parent that is gone: the running
// task is cancelled, module loads too, and onLost bounds how long the rest
// may take.
func (s *session) lost() {
	s.taskStop.Stop("the parent disconnected")
	s.mu.Lock()
	r := s.resolve
	s.gone = true
	s.mu.Unlock()
	if c, ok := r.(interface{ Cancel(string) }); ok {
		c.Cancel("the parent disconnected")
	}
	if s.onLost != nil {
		s.onLost()
	}
}

// handOffTick is how long one piece of work may run on the reading
// goroutine before the watchdog starts another reader (at most two ticks).
const handOffTick = 5 * time.Millisecond

// watchdog hands the reading role on when the reader's work has run for a
// tick.
func (s *session) watchdog(stop chan struct{}) {
	defer s.readers.Done()
	tick := time.NewTicker(handOffTick)
	defer tick.Stop()
	var seen uint64
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		s.mu.Lock()
		if s.readerBusy && s.workSeq == seen {
			s.readerBusy = false
			s.reader++
			s.readers.Add(1)
			go s.read(s.reader)
		}
		seen = s.workSeq
		s.mu.Unlock()
	}
}

// read is the reading role, held while role == s.reader: it reads frames
// until the connection ends or the role passed on while it worked.
func (s *session) read(role uint64) {
	defer s.readers.Done()
	for {
		f, err := s.readFrame()
		if err != nil {
			s.readEnd <- err
			return
		}
		switch f.h.Type {
		case wire.TypeHealth:
			f.done()
			s.mu.Lock()
			n := s.inflight
			s.mu.Unlock()
			if err := s.write(wire.TypeHealthReply, f.h.Seq, &wire.HealthReply{Timestamp: time.Now().UnixNano(), InFlight: uint32(n)}); err != nil {
				s.readEnd <- err
				return
			}
		case wire.TypeControl:
			if !s.work(role, func() { s.control(f); f.done() }) {
				return // another goroutine reads now
			}
		case wire.TypeTask:
			s.mu.Lock()
			if s.running && (len(s.queued) >= int(s.limits.QueuedTasks) || s.queuedBytes+uint64(len(f.payload)) > s.limits.QueuedBytes) {
				n := len(s.queued)
				s.mu.Unlock()
				f.done()
				s.refuseTask(f.h.Seq, n)
				continue
			}
			s.inflight++
			if s.running {
				s.queued = append(s.queued, f)
				s.queuedBytes += uint64(len(f.payload))
				s.mu.Unlock()
				continue
			}
			s.running = true
			s.mu.Unlock()
			if !s.work(role, func() { s.runTasks(f) }) {
				return
			}
		case wire.TypeShutdown:
			s.readEnd <- nil
			return
		default:
			s.readEnd <- fmt.Errorf("unexpected %s frame from the parent", f.h.Type)
			return
		}
	}
}

// work runs fn on the reading goroutine and reports whether that goroutine
// still holds the reading role afterwards.
func (s *session) work(role uint64, fn func()) bool {
	s.mu.Lock()
	s.readerBusy = true
	s.mu.Unlock()
	fn()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.workSeq++
	if s.reader != role {
		return false
	}
	s.readerBusy = false
	return true
}

// readFrame reads the next frame; a large CONTROL may be read straight
// into its destination (readBulk).
func (s *session) readFrame() (frame, error) {
	h, err := wire.ReadHeader(s.in, wire.MaxPayload)
	if err != nil {
		return frame{}, err
	}
	if h.Type == wire.TypeControl && int(h.Length) > s.bigFrame {
		return s.readBulk(h)
	}
	payload, done, err := s.readPayload(h)
	return frame{h: h, payload: payload, done: done}, err
}

// runTasks runs f and every task queued meanwhile, in order.
func (s *session) runTasks(f frame) {
	for {
		s.mu.Lock()
		gone := s.gone
		s.curSeq = f.h.Seq
		if !gone {
			s.taskStop.Reset()
		}
		s.mu.Unlock()
		if !gone { // tasks queued for a parent that went away are not run
			s.task(f)
		}
		f.done()
		s.mu.Lock()
		s.curSeq = 0
		if len(s.queued) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		f = s.queued[0]
		s.queued = s.queued[1:]
		s.queuedBytes -= uint64(len(f.payload))
		s.mu.Unlock()
	}
}

// refuseTask fails a task the queue has no room for, at once.
func (s *session) refuseTask(seq uint64, queued int) {
	fail := &wire.TaskFailure{Kind: string(engine.RuntimeError), Message: fmt.Sprintf(
		"this node has %d tasks (or %d bytes of them) queued, its bound (the daemon's --max-queued-tasks, --max-queued-bytes)", queued, s.limits.QueuedBytes)}
	s.write(wire.TypeCompletion, seq, &wire.Completion{Seq: seq, Err: fail})
}

type frame struct {
	h       wire.Header
	payload []byte
	done    func() // called once the payload is no longer needed
	copied  bool   // a COPY_TO whose data the reader already placed
}

// errBody is err as it crosses the wire: its kind and its message apart,
// which the parent makes into a typed Error again (node.go).
func errBody(err error) *wire.ErrorBody {
	return &wire.ErrorBody{Kind: string(engine.KindOf(err)), Message: message(err)}
}

// message is err's text without the kind engine.KindOf gives it in front:
// engine's rule (the mailbox's errors cross the same way), kept beside
// errBody since engine does not export it.
func message(err error) string {
	var e *kind.Error
	if errors.As(err, &e) {
		return kind.Message(err)
	}
	_, msg, _ := kind.Split(err.Error())
	return msg
}

// task runs one orchestration callable on the inner worker.
func (s *session) task(f frame) {
	c := &wire.Completion{Seq: f.h.Seq}
	if err := s.runTask(f.payload); err != nil {
		fail := &wire.TaskFailure{}
		if te, ok := err.(*engine.TaskError); ok {
			fail.Path, fail.TaskID, fail.Callable = te.Worker, uint64(te.TaskID), te.Callable
			err = te.Err
		}
		body := errBody(err)
		fail.Kind, fail.Message = body.Kind, body.Message
		c.Err = fail
	}
	s.mu.Lock()
	s.inflight--
	s.mu.Unlock()
	s.write(wire.TypeCompletion, f.h.Seq, c)
}

func (s *session) runTask(payload []byte) error {
	t, err := wire.DecodeTask(payload)
	if err != nil {
		return engine.Errorf(engine.ValueError, "TASK: %v", err)
	}
	s.mu.Lock()
	fn := s.callables[t.Digest]
	s.mu.Unlock()
	oc, ok := fn.(engine.OrchCallable)
	if !ok {
		return engine.Errorf(engine.ValueError, "TASK: callable %s is not registered on this node", t.Digest)
	}
	args, scratch, err := s.taskArgs(t)
	defer func() {
		for _, seg := range scratch {
			hostmem.Unregister(seg)
			seg.Close()
		}
	}()
	if err != nil {
		return err
	}
	cfg := engine.CallConfigOf(t.Config)
	r, err := s.inner.SubmitStoppable(func(o *engine.Orchestrator) (any, error) { return nil, oc.RunOrch(o, args, &cfg) }, &s.taskStop)
	if err != nil {
		return err
	}
	return r.Wait(-1)
}

// cancel stops the task of sequence seq: the running one's run is
// cancelled; a queued one is taken out and fails at once.
func (s *session) cancel(seq uint64) error {
	s.mu.Lock()
	if s.curSeq == seq {
		s.mu.Unlock()
		s.taskStop.Stop(fmt.Sprintf("task %d cancelled by the parent", seq))
		return nil
	}
	for i, f := range s.queued {
		if f.h.Seq == seq {
			s.queued = append(s.queued[:i], s.queued[i+1:]...)
			s.queuedBytes -= uint64(len(f.payload))
			s.inflight--
			s.mu.Unlock()
			f.done()
			fail := &wire.TaskFailure{Kind: string(engine.RuntimeError), Message: "cancelled before it ran"}
			return s.write(wire.TypeCompletion, seq, &wire.Completion{Seq: seq, Err: fail})
		}
	}
	s.mu.Unlock()
	return nil // done already: nothing to stop
}

// taskArgs places each tensor in this process: a remote ref resolves to
// the buffer's memory here; inline bytes get scratch shared memory.
func (s *session) taskArgs(t wire.Task) (*engine.TaskArgs, []*shm.Segment, error) {
	a := &engine.TaskArgs{}
	var scratch []*shm.Segment
	for i, ta := range t.Tensors {
		ten := engine.Tensor{Shape: ta.Shape, DType: dtype.DType(ta.DType)}
		n := ten.NBytes()
		if ta.Remote != nil {
			s.mu.Lock()
			b := s.bufs[ta.Remote.Buffer]
			s.mu.Unlock()
			if b == nil {
				return nil, scratch, engine.Errorf(engine.ValueError, "TASK: tensor %d names buffer %d (generation %d), which this node does not hold", i, ta.Remote.Buffer.ID, ta.Remote.Buffer.Generation)
			}
			if !bounds.Fits(ta.Remote.Offset, uint64(n), uint64(b.len)) {
				return nil, scratch, engine.Errorf(engine.ValueError, "TASK: tensor %d (%d bytes at offset %d) overruns its %d-byte buffer", i, n, ta.Remote.Offset, b.len)
			}
			if ta.Remote.Access&^b.access != 0 {
				return nil, scratch, engine.Errorf(engine.ValueError, "TASK: tensor %d needs %s access; the buffer here allows %s", i, ta.Remote.Access, b.access)
			}
			ten.Addr = b.seg.Addr() + uint64(b.off) + ta.Remote.Offset
		} else {
			seg, err := shm.Create("inline", max(len(ta.Inline), 1))
			if err != nil {
				return nil, scratch, err
			}
			hostmem.Register(seg)
			scratch = append(scratch, seg)
			copy(seg.Mem, ta.Inline)
			ten.Addr = seg.Addr()
		}
		if err := a.AddTensor(ten, engine.Tag(ta.Tag)); err != nil {
			return nil, scratch, err
		}
	}
	a.Scalars = t.Scalars
	return a, scratch, nil
}

// control runs one command and replies with the request's sequence.
func (s *session) control(f frame) {
	r := &wire.ControlReply{Seq: f.h.Seq}
	if f.copied {
		r.Cmd = wire.CmdCopyTo
		s.write(wire.TypeControlReply, f.h.Seq, r)
		return
	}
	c, err := wire.DecodeControl(f.payload)
	if err == nil {
		r.Cmd = c.Cmd
		err = s.command(c, r)
	} else {
		r.Cmd = wire.CmdRegister // a reply needs a valid command; the error says what went wrong
		err = engine.Errorf(engine.ValueError, "CONTROL: %v", err)
	}
	if err != nil {
		r.Err = errBody(err)
		r.Buffer, r.Data = wire.BufferRef{}, nil
	}
	if r.Err == nil && r.Cmd == wire.CmdCopyFrom {
		data := r.Data
		r.Data = nil
		s.writeBulk(wire.TypeControlReply, f.h.Seq, r, data)
		return
	}
	s.write(wire.TypeControlReply, f.h.Seq, r)
}

func (s *session) command(c wire.Control, r *wire.ControlReply) error {
	switch c.Cmd {
	case wire.CmdCancel:
		return s.cancel(c.TaskSeq)
	case wire.CmdBundle:
		return s.bundle(c.Bundle)
	case wire.CmdRegister:
		return s.register(c)
	case wire.CmdUnregister:
		return s.unregister(c)
	case wire.CmdMalloc:
		return s.malloc(c.NBytes, r)
	case wire.CmdFree, wire.CmdReleaseImport:
		return s.drop(c.Buffer, c.Cmd == wire.CmdFree)
	case wire.CmdCopyTo, wire.CmdCopyFrom:
		return s.copy(c, r)
	case wire.CmdExport:
		return s.export(c, r)
	case wire.CmdImport:
		return s.importExport(c, r)
	}
	return s.global(c, r)
}

// bundle loads the parent's code, once.
func (s *session) bundle(b wire.Bundle) error {
	s.mu.Lock()
	had := s.resolve != nil
	s.mu.Unlock()
	if had {
		return engine.Errorf(engine.ValueError, "BUNDLE: this node already has its code")
	}
	r, err := s.newResolver(b, s.limits.LoadSteps)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.resolve = r
	s.mu.Unlock()
	return nil
}

func (s *session) register(c wire.Control) error {
	s.mu.Lock()
	res := s.resolve
	s.mu.Unlock()
	if res == nil {
		return engine.Errorf(engine.RuntimeError, "REGISTER: this node has no code yet (the parent sends BUNDLE first)")
	}
	fn, err := res.Resolve(c.Digest, c.Module, c.Name)
	if err != nil {
		return err
	}
	if _, err := s.inner.Register(fn, nil); err != nil {
		return err
	}
	s.mu.Lock()
	s.callables[c.Digest] = fn
	s.mu.Unlock()
	return nil
}

func (s *session) unregister(c wire.Control) error {
	h, ok := s.inner.Lookup(c.Digest)
	if !ok {
		return engine.Errorf(engine.ValueError, "UNREGISTER: %s is not registered on this node", c.Digest)
	}
	if err := s.inner.Unregister(h); err != nil {
		return err
	}
	if _, still := s.inner.Lookup(c.Digest); !still {
		s.mu.Lock()
		delete(s.callables, c.Digest)
		s.mu.Unlock()
	}
	return nil
}

// global runs a global-domain command on the inner worker; the windows
// of PREPARE (and of REATTACH, which takes pooled ones back) count against
// the session's memory bound until the domain is released or aborted.
func (s *session) global(c wire.Control, r *wire.ControlReply) error {
	id := c.Domain.ID
	if c.Cmd == wire.CmdPrepare || c.Cmd == wire.CmdReattach {
		need := c.Domain.WindowSize * uint64(len(c.Domain.Ranks)) // both bounded by the decoder: no overflow
		s.mu.Lock()
		_, had := s.windows[id]
		err := s.reserve(need, had, "PREPARE")
		s.mu.Unlock()
		if err != nil {
			return err
		}
		if err := s.inner.GlobalCommand(c, r); err != nil {
			if !had {
				s.mu.Lock()
				s.owned -= need
				s.mu.Unlock()
			}
			return err
		}
		s.mu.Lock()
		s.windows[id] = need
		s.mu.Unlock()
		return nil
	}
	err := s.inner.GlobalCommand(c, r)
	if err == nil && (c.Cmd == wire.CmdAbort || c.Cmd == wire.CmdReleaseDomain) {
		s.mu.Lock()
		s.owned -= s.windows[id]
		delete(s.windows, id)
		s.mu.Unlock()
	}
	return err
}

// reserve counts n more bytes against the session's memory bound (none if
// already is set: a repeated PREPARE). Caller holds s.mu.
func (s *session) reserve(n uint64, already bool, op string) error {
	if already {
		return nil
	}
	if n > s.limits.BufferBytes || s.owned > s.limits.BufferBytes-n {
		return engine.Errorf(engine.RuntimeError, "%s: %d bytes more would bring this session's memory to %d bytes, beyond its bound of %d (the daemon's --max-buffer-bytes)",
			op, n, s.owned+n, s.limits.BufferBytes)
	}
	s.owned += n
	return nil
}

// close frees everything the session holds: imports first, then owned
// buffers, then the inner worker.
func (s *session) close() {
	s.mu.Lock()
	bufs := s.bufs
	s.bufs = map[wire.BufferRef]*sbuf{}
	s.mu.Unlock()
	for _, owned := range []bool{false, true} {
		for _, b := range bufs {
			if b.owned == owned {
				hostmem.Unregister(b.seg)
				b.seg.Close()
			}
		}
	}
	if s.inner != nil {
		s.inner.Close()
	}
	s.conn.Close()
	s.link.close() // ends serveLink
	<-s.linkDone
}

// readPayload reads a payload; a large one goes into the reused buffer,
// which comes back when done is called.
func (s *session) readPayload(h wire.Header) ([]byte, func(), error) {
	if int(h.Length) <= s.bigFrame {
		p, err := wire.ReadPayload(s.in, h, nil)
		return p, func() {}, err
	}
	buf := <-s.big
	p, err := wire.ReadPayload(s.in, h, buf)
	if err != nil {
		s.big <- buf
		return nil, nil, err
	}
	return p, func() { s.big <- p[:cap(p)] }, nil
}

// readBulk reads a large CONTROL frame. A COPY_TO into an owned buffer is
// read straight into the buffer's memory: the data crosses this process
// once. Anything else is read whole and handled as usual. (The parent has
// one command in flight, so no other command touches the buffer
// meanwhile.)
func (s *session) readBulk(h wire.Header) (frame, error) {
	prefix := make([]byte, wire.CopyToPrefixSize)
	if _, err := io.ReadFull(s.in, prefix); err != nil {
		return frame{}, err
	}
	ref, off, n, ok := wire.DecodeCopyToPrefix(prefix, int(h.Length))
	if ok {
		if b, err := s.buf(ref, true); err == nil && s.checkCopy(wire.CmdCopyTo, off, uint64(n), b.len) == nil {
			if _, err := io.ReadFull(s.in, b.bytes()[off:off+uint64(n)]); err != nil {
				return frame{}, err
			}
			return frame{h: h, done: func() {}, copied: true}, nil
		}
	}
	p := append(make([]byte, 0, int(h.Length)), prefix...) // the rest is read after it, not copied
	if _, err := io.ReadFull(s.in, p[len(p):h.Length]); err != nil {
		return frame{}, err
	}
	return frame{h: h, payload: p[:h.Length], done: func() {}}, nil
}
