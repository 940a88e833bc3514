package remote

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"simpler/engine"
	"simpler/hal"
	"simpler/hal/shm"
	"simpler/internal/hostid"
	"simpler/internal/netspin"
	"simpler/internal/orphan"
	"simpler/internal/race"
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
	onLost      func()         // the parent went away without a SHUTDOWN
	race        *race.Detector // --race: checks what runs here (nil: off)
	stdout      *sessionPrint  // the print of the session's code, forwarded to the parent
	stderr      *sessionPrint  // its stderr; the detector's reports share its bound (raceOutput)
	spans       taskSpans      // what the running task did, for the parent's trace

	wmu      sync.Mutex  // serialises frames written: one is written whole before the next
	writeErr error       // the first write that failed (under wmu): nothing is written after it
	big      chan []byte // the reusable buffer for large frames (COPY_TO data)
	bigFrame int         // payloads above this go to big, or straight to their buffer (bigFrame; less in the fuzzer)

	mu          sync.Mutex
	resolve     engine.Resolver // set by BUNDLE
	callables   map[string]engine.Callable
	bufs        map[wire.BufferRef]*sbuf // owned and imported, by the ref handed out
	bufSeq      uint64
	retired     map[*sbuf]bool    // freed, and still held by a reply or a task
	mem         account           // bytes mapped: owned buffers, imports and global windows
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
	charge   uint64 // the bytes its mapping counts in the session's account
	pins     int    // replies and tasks holding it (hold)
	retired  bool   // freed or released: out of the table, unmapped once no one holds it
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
// is called when the parent goes away without a SHUTDOWN. With raceOn
// the session checks what runs on it (--race), reporting on the stderr
// its parent is forwarded.
func runSession(conn net.Conn, l *link, start wire.Link, daemonMem ledgerEntry, newResolver SourceResolver, onLost func(), raceOn bool) error {
	s := newSession(conn, l, start, newResolver, onLost)
	if raceOn {
		s.race = race.New(s.raceOutput())
	}
	s.mem.daemon = daemonMem
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
		newResolver: newResolver, onLost: onLost, callables: map[string]engine.Callable{}, bufs: map[wire.BufferRef]*sbuf{}, retired: map[*sbuf]bool{},
		windows: map[uint64]uint64{}, exports: map[[16]byte]export{}, grants: map[uint64]chan grant{}, big: make(chan []byte, 1), bigFrame: bigFrame,
		linkDone: make(chan struct{})}
	s.mem.bound = start.Limits.BufferBytes
	s.big <- nil
	s.stdout, s.stderr = newSessionPrints(s.sendOutput, DefaultOutputBytes, os.Stdout, os.Stderr)
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
	if s.writeErr != nil {
		return s.writeErr
	}
	if err := wire.WriteMessage(s.conn, h, m, bulk); err != nil {
		s.failWrite(err)
		return err
	}
	return nil
}

// failWrite ends the session after a write that failed: the frame may
// have been cut in the middle, and nothing written after it could be read
// right, so no frame is written again and the connection is closed, which
// ends the reading and frees what the session holds. serve returns why.
// Caller holds wmu.
func (s *session) failWrite(err error) {
	s.writeErr = fmt.Errorf("a frame to the parent could not be written whole, so the session ends: %w", err)
	s.conn.Close()
}

// writeFailure is the write that ended the session, if one did.
func (s *session) writeFailure() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.writeErr
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
		CommProfile: hello.CommProfile, GlobalDeviceRanks: hello.GlobalDeviceRanks, Race: s.race, Served: true})
	if err != nil {
		return err
	}
	s.inner.Events().Observe(s.spans.note) // the chip tasks each COMPLETION reports
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
	if werr := s.writeFailure(); werr != nil {
		return werr
	}
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
			s.endOn(err)
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
			f.done()
			s.endOn(protocolErrorf("unexpected %s frame from the parent", f.h.Type))
			return
		}
	}
}

// endOn ends the reading role on err. A protocol error is told to the
// parent first, in a SHUTDOWN naming it (docs/protocol.md).
func (s *session) endOn(err error) {
	var pe *protocolError
	if errors.As(err, &pe) {
		s.write(wire.TypeShutdown, 0, &wire.Shutdown{Reason: pe.reason()})
	}
	s.readEnd <- err
}

// protocolError is a frame that breaks the protocol's rules: the session
// ends on it.
type protocolError struct{ msg string }

func protocolErrorf(format string, a ...any) error {
	return &protocolError{msg: fmt.Sprintf(format, a...)}
}

func (e *protocolError) Error() string { return "protocol error: " + e.msg }

// reason is the error as a SHUTDOWN carries it, within wire.MaxReason.
func (e *protocolError) reason() string {
	r := e.Error()
	if len(r) > wire.MaxReason {
		r = r[:wire.MaxReason]
	}
	return r
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
	// Checked before a byte of the payload is read: a frame of another
	// session is not served, not even a COPY_TO's data.
	if h.Session != s.id {
		return frame{}, protocolErrorf("a %s frame of session %d on the connection of session %d", h.Type, h.Session, s.id)
	}
	if h.Type == wire.TypeControl && int(h.Length) > s.bigFrame {
		return s.readBulk(h)
	}
	payload, done, err := s.readPayload(h)
	return frame{h: h, payload: payload, done: done}, err
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

// close frees everything the session holds: imports first, then owned
// buffers, then the inner worker.
func (s *session) close() {
	s.mu.Lock()
	var bufs []*sbuf
	for _, b := range s.bufs {
		bufs = append(bufs, b)
	}
	for b := range s.retired { // held by work that never came back
		bufs = append(bufs, b)
	}
	s.bufs, s.retired = map[wire.BufferRef]*sbuf{}, map[*sbuf]bool{}
	s.mu.Unlock()
	for _, owned := range []bool{false, true} {
		for _, b := range bufs {
			if b.owned == owned {
				s.unmap(b)
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
		if b, err := s.hold(ref, true); err == nil {
			if s.checkCopy(wire.CmdCopyTo, off, uint64(n), b.len) == nil {
				_, err := io.ReadFull(s.in, b.bytes()[off:off+uint64(n)])
				s.letGo(b)
				if err != nil {
					return frame{}, err
				}
				return frame{h: h, done: func() {}, copied: true}, nil
			}
			s.letGo(b)
		}
	}
	p := append(make([]byte, 0, int(h.Length)), prefix...) // the rest is read after it, not copied
	if _, err := io.ReadFull(s.in, p[len(p):h.Length]); err != nil {
		return frame{}, err
	}
	return frame{h: h, payload: p[:h.Length], done: func() {}}, nil
}

// ServeSessionFD runs the session whose connection is file descriptor 3,
// whose link to the daemon is descriptor 4 and whose daemon's memory
// ledger is descriptor 5 (how Daemon starts it). With raceOn (the
// daemon's --race) a detector checks what runs on the node.
func ServeSessionFD(newResolver SourceResolver, raceOn bool) error {
	// No sweep: names carry no pid to collide with, the daemon swept at
	// its start and sweeps each session's prefix once the session is gone.
	mem, err := openLedger(os.NewFile(ledgerFD, "ledger"))
	if err != nil {
		return err
	}
	defer mem.close()
	l, err := fileLink(os.NewFile(4, "link"))
	if err != nil {
		return err
	}
	f := os.NewFile(3, "session")
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		l.close()
		return err
	}
	start, err := readStart(l)
	var entry ledgerEntry
	if err == nil {
		entry, err = mem.claim(start.Slot)
	}
	if err != nil {
		conn.Close()
		l.close()
		return err
	}
	// An interrupt (the daemon closing), the daemon's death or the
	// parent's disconnect ends the session the clean way: closing the
	// connection ends serve, which frees what it holds.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	closeConn := func() { conn.Close() }
	end := orphan.Watch(sig, closeConn)
	err = runSession(conn, l, start, entry, newResolver, func() { orphan.Abandon(closeConn) }, raceOn)
	signal.Stop(sig)
	end()
	return err
}

// readStart reads the daemon's LINK_START.
func readStart(l *link) (wire.Link, error) {
	l.conn.SetReadDeadline(time.Now().Add(HelloTimeout))
	defer l.conn.SetReadDeadline(time.Time{})
	buf, oob := linkBuffers()
	m, fd, err := l.recv(buf, oob)
	closeFD(fd)
	if err == nil && m.Kind != wire.LinkStart {
		err = fmt.Errorf("link: first message is %d, want LINK_START", m.Kind)
	}
	return m, err
}
