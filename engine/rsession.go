package engine

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/hal/dtype"
	"simpler/hal/shm"
	"simpler/internal/netspin"
	"simpler/wire"
)

// SourceResolver makes a resolver from shipped module sources: a remote
// node has no copy of the parent's files.
type SourceResolver func(root string, modules []wire.Module) (Resolver, error)

// HelloTimeout bounds the handshake of a new session.
var HelloTimeout = 10 * time.Second

// session is one remote L3 node as its daemon runs it: the connection to
// the parent, an inner level-3 Worker, the remote buffers it owns and the
// imports it holds. It runs in a process of its own.
type session struct {
	conn    net.Conn
	in      io.Reader // conn, read spinning briefly before blocking
	id      uint64
	worker  uint32
	inner   *Worker
	resolve Resolver

	wmu sync.Mutex  // serialises frames written
	big chan []byte // the reusable buffer for large frames (COPY_TO data)

	mu        sync.Mutex
	callables map[string]Callable
	bufs      map[wire.BufferRef]*sbuf // owned and imported, by the ref handed out
	bufSeq    uint64
	inflight  int     // tasks received and not yet completed
	running   bool    // a goroutine is running tasks
	queued    []frame // tasks read while one runs, in arrival order
	// reader names the goroutine holding the reading role (read's role);
	// readerBusy says it is running a command or tasks, and workSeq
	// counts finished work, so the watchdog sees work that spans a tick.
	reader     uint64
	readerBusy bool
	workSeq    uint64

	readEnd chan error     // the reading role ended: why
	readers sync.WaitGroup // goroutines reading, working or watching
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

// RunSession serves one session on conn until the parent shuts it down or
// goes away. token, if not nil, is what the parent must prove it knows.
func RunSession(conn net.Conn, token []byte, newResolver SourceResolver) error {
	s := &session{conn: conn, callables: map[string]Callable{}, bufs: map[wire.BufferRef]*sbuf{}, big: make(chan []byte, 1)}
	s.big <- nil
	defer s.close()
	if err := s.handshake(token, newResolver); err != nil {
		return err
	}
	s.in = netspin.NewReader(conn, netspin.DefaultSpin)
	return s.serve()
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

// handshake: CHALLENGE, HELLO (manifest, code, proof), HELLO_REPLY.
func (s *session) handshake(token []byte, newResolver SourceResolver) error {
	var ch wire.Challenge
	if _, err := rand.Read(ch.Nonce[:]); err != nil {
		return err
	}
	s.conn.SetDeadline(time.Now().Add(HelloTimeout))
	defer s.conn.SetDeadline(time.Time{})
	if err := wire.WriteMessage(s.conn, wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeChallenge}, &ch, nil); err != nil {
		return err
	}
	h, payload, err := wire.ReadFrame(s.conn, wire.TypeHello.MaxPayload())
	if err != nil {
		return err
	}
	if h.Type != wire.TypeHello {
		return fmt.Errorf("first frame is %s, want HELLO", h.Type)
	}
	s.id, s.worker = h.Session, h.Worker
	hello, err := wire.DecodeHello(payload)
	if err == nil {
		err = s.accept(hello, token, ch, newResolver)
	}
	reply := &wire.HelloReply{Accepted: err == nil, Session: s.id, Worker: s.worker, Version: wire.ProtocolVersion, CommProfile: hello.CommProfile}
	if hello.CommProfile == "" {
		reply.CommProfile = "sim"
	}
	if err != nil {
		k, msg, _ := SplitKind(err.Error())
		if k == "" {
			k = RuntimeError
		}
		reply.Err = &wire.ErrorBody{Kind: string(k), Message: msg}
	}
	if werr := s.write(wire.TypeHelloReply, 0, reply); werr != nil && err == nil {
		err = werr
	}
	return err
}

// accept checks the parent's proof and manifest and brings the node up.
func (s *session) accept(hello wire.Hello, token []byte, ch wire.Challenge, newResolver SourceResolver) error {
	if token != nil && !wire.Verify(token, ch.Nonce, s.id, hello.Proof) {
		return Errorf(ValueError, "HELLO: the token proof does not match")
	}
	p, err := hal.Lookup(hello.Platform)
	if err != nil {
		return err
	}
	if !p.Simulated() || hello.CommProfile != "sim" && !slices.Contains(p.CommProfiles(), hello.CommProfile) {
		return Errorf(ValueError, "HELLO: comm profile %q is not served on %s", hello.CommProfile, p.Name())
	}
	if s.resolve, err = newResolver(hello.Root, hello.Modules); err != nil {
		return err
	}
	s.inner, err = NewWorker(Config{Level: 3, Platform: p, DeviceIDs: hello.DeviceIDs, NumSubWorkers: hello.NumSubWorkers,
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
	s.readers.Wait() // work in hand and queued tasks finish before the session closes
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return nil // the parent went away, or abandon closed the connection
	}
	return err
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
			s.inflight++
			if s.running {
				s.queued = append(s.queued, f)
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
	if h.Type == wire.TypeControl && int(h.Length) > bigFrame {
		return s.readBulk(h)
	}
	payload, done, err := s.readPayload(h)
	return frame{h: h, payload: payload, done: done}, err
}

// runTasks runs f and every task queued meanwhile, in order.
func (s *session) runTasks(f frame) {
	for {
		s.task(f)
		f.done()
		s.mu.Lock()
		if len(s.queued) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		f = s.queued[0]
		s.queued = s.queued[1:]
		s.mu.Unlock()
	}
}

type frame struct {
	h       wire.Header
	payload []byte
	done    func() // called once the payload is no longer needed
	copied  bool   // a COPY_TO whose data the reader already placed
}

func errBody(err error) *wire.ErrorBody {
	k, msg, ok := SplitKind(err.Error())
	if !ok {
		k = RuntimeError
	}
	return &wire.ErrorBody{Kind: string(k), Message: msg}
}

// task runs one orchestration callable on the inner worker.
func (s *session) task(f frame) {
	c := &wire.Completion{Seq: f.h.Seq}
	if err := s.runTask(f.payload); err != nil {
		fail := &wire.TaskFailure{}
		if te, ok := err.(*TaskError); ok {
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
		return Errorf(ValueError, "TASK: %v", err)
	}
	s.mu.Lock()
	fn := s.callables[t.Digest]
	s.mu.Unlock()
	oc, ok := fn.(OrchCallable)
	if !ok {
		return Errorf(ValueError, "TASK: callable %s is not registered on this node", t.Digest)
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
	cfg := CallConfig{BlockDim: t.Config.BlockDim, AicpuThreadNum: t.Config.AicpuThreadNum, EnableProfiling: t.Config.EnableProfiling}
	_, err = s.inner.Run(func(o *Orchestrator) (any, error) { return nil, oc.RunOrch(o, args, &cfg) })
	return err
}

// taskArgs places each tensor in this process: a remote ref resolves to
// the buffer's memory here; inline bytes get scratch shared memory.
func (s *session) taskArgs(t wire.Task) (*TaskArgs, []*shm.Segment, error) {
	a := &TaskArgs{}
	var scratch []*shm.Segment
	for i, ta := range t.Tensors {
		ten := Tensor{Shape: ta.Shape, DType: dtype.DType(ta.DType)}
		n := ten.NBytes()
		if ta.Remote != nil {
			s.mu.Lock()
			b := s.bufs[ta.Remote.Buffer]
			s.mu.Unlock()
			if b == nil {
				return nil, scratch, Errorf(ValueError, "TASK: tensor %d names buffer %d (generation %d), which this node does not hold", i, ta.Remote.Buffer.ID, ta.Remote.Buffer.Generation)
			}
			if int(ta.Remote.Offset)+n > b.len {
				return nil, scratch, Errorf(ValueError, "TASK: tensor %d (%d bytes at offset %d) overruns its %d-byte buffer", i, n, ta.Remote.Offset, b.len)
			}
			if ta.Remote.Access&^b.access != 0 {
				return nil, scratch, Errorf(ValueError, "TASK: tensor %d needs %s access; the buffer here allows %s", i, ta.Remote.Access, b.access)
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
		if err := a.AddTensor(ten, Tag(ta.Tag)); err != nil {
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
		err = Errorf(ValueError, "CONTROL: %v", err)
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
	case wire.CmdRegister:
		fn, err := s.resolve.Resolve(c.Digest, c.Module, c.Name)
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
	case wire.CmdUnregister:
		h, ok := s.inner.Lookup(c.Digest)
		if !ok {
			return Errorf(ValueError, "UNREGISTER: %s is not registered on this node", c.Digest)
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
	case wire.CmdMalloc:
		seg, err := shm.Create("rbuf", int(c.NBytes))
		if err != nil {
			return err
		}
		hostmem.Register(seg)
		r.Buffer = s.add(&sbuf{seg: seg, len: int(c.NBytes), access: wire.AccessReadWrite, owned: true})
		return nil
	case wire.CmdFree, wire.CmdReleaseImport:
		return s.drop(c.Buffer, c.Cmd == wire.CmdFree)
	case wire.CmdCopyTo, wire.CmdCopyFrom:
		b, err := s.buf(c.Buffer, true)
		if err != nil {
			return err
		}
		n := int(c.NBytes)
		if c.Cmd == wire.CmdCopyTo {
			n = len(c.Data)
		}
		if int(c.Offset)+n > b.len {
			return Errorf(ValueError, "%s: %d bytes at offset %d overrun the %d-byte buffer", c.Cmd, n, c.Offset, b.len)
		}
		if c.Cmd == wire.CmdCopyTo {
			copy(b.bytes()[c.Offset:], c.Data)
		} else {
			r.Data = b.bytes()[c.Offset : int(c.Offset)+n] // sent in place, see control
		}
		return nil
	case wire.CmdExport:
		b, err := s.buf(c.Buffer, true)
		if err != nil {
			return err
		}
		if c.Offset+c.NBytes > uint64(b.len) || c.NBytes == 0 {
			return Errorf(ValueError, "EXPORT: %d bytes at offset %d do not fit the %d-byte buffer", c.NBytes, c.Offset, b.len)
		}
		r.Data = exportToken(b.seg, c.Offset, c.NBytes, c.Access)
		return nil
	case wire.CmdImport:
		seg, off, n, access, err := s.importToken(c.Token)
		if err != nil {
			return err
		}
		if c.Access != 0 {
			if c.Access&^access != 0 {
				seg.Close()
				return Errorf(ValueError, "IMPORT: %s access asked of an export that allows %s", c.Access, access)
			}
			access = c.Access
		}
		hostmem.Register(seg)
		r.Buffer = s.add(&sbuf{seg: seg, off: off, len: n, access: access})
		return nil
	}
	return s.inner.globalCommand(c, r)
}

func (s *session) add(b *sbuf) wire.BufferRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bufSeq++
	ref := wire.BufferRef{ID: s.bufSeq, Generation: 1}
	s.bufs[ref] = b
	return ref
}

func (s *session) buf(ref wire.BufferRef, owned bool) (*sbuf, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.bufs[ref]
	if b == nil || b.owned != owned {
		return nil, Errorf(ValueError, "buffer %d (generation %d) is not an owned buffer of this node", ref.ID, ref.Generation)
	}
	return b, nil
}

// drop frees an owned buffer or releases an import.
func (s *session) drop(ref wire.BufferRef, owned bool) error {
	s.mu.Lock()
	b := s.bufs[ref]
	if b == nil || b.owned != owned {
		s.mu.Unlock()
		what := "an imported buffer"
		if owned {
			what = "an owned buffer"
		}
		return Errorf(ValueError, "buffer %d (generation %d) is not %s of this node", ref.ID, ref.Generation, what)
	}
	delete(s.bufs, ref)
	s.mu.Unlock()
	hostmem.Unregister(b.seg)
	return b.seg.Close()
}

// exportToken describes a range of a buffer for a peer on this host: the
// shared-memory object, the range and the access. It is opaque to scripts.
func exportToken(seg *shm.Segment, off, n uint64, access wire.Access) []byte {
	var e wire.Encoder
	e.String(seg.Name)
	e.Int(len(seg.Mem))
	e.U64(off)
	e.U64(n)
	e.U8(uint8(access))
	return e.Bytes()
}

func (s *session) importToken(tok []byte) (*shm.Segment, int, int, wire.Access, error) {
	d := wire.NewDecoder(tok)
	name, size, off, n, access := d.String(), d.Int(1<<40), d.Int(1<<40), d.Int(1<<40), wire.Access(d.U8())
	if err := d.Finish(); err != nil || !access.Valid() || off+n > size {
		return nil, 0, 0, 0, Errorf(ValueError, "IMPORT: a malformed export token")
	}
	seg, err := shm.Open(name, size)
	if err != nil {
		return nil, 0, 0, 0, Errorf(RuntimeError, "IMPORT: the exported buffer is gone: %v", err)
	}
	return seg, off, n, access, nil
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
}

// readPayload reads a payload; a large one goes into the reused buffer,
// which comes back when done is called.
func (s *session) readPayload(h wire.Header) ([]byte, func(), error) {
	if int(h.Length) <= bigFrame {
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
		if b, err := s.buf(ref, true); err == nil && int(off)+n <= b.len {
			if _, err := io.ReadFull(s.in, b.bytes()[off:int(off)+n]); err != nil {
				return frame{}, err
			}
			return frame{h: h, done: func() {}, copied: true}, nil
		}
	}
	rest := make([]byte, int(h.Length)-len(prefix))
	if _, err := io.ReadFull(s.in, rest); err != nil {
		return frame{}, err
	}
	return frame{h: h, payload: append(prefix, rest...), done: func() {}}, nil
}
