package remote

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"simpler/engine"
	"simpler/wire"
)

// DaemonConfig says whom a daemon admits and what each session may hold.
type DaemonConfig struct {
	Token []byte // what a parent must prove; required
	// Session starts a session process: fd 3 is the connection, fd 4 the
	// link, fd 5 the memory ledger. Its Stdout and Stderr (nil: this process's) receive the
	// session's output line by line, each line tagged with the session.
	Session *engine.Launcher
	Log     io.Writer   // refusals and session failures; nil: discarded
	Limits  wire.Limits // per session; zero fields take DefaultLimits' values
	// MaxPending bounds the connections that have not yet sent their
	// proof: in all (default 64), and half of that from one address. A new
	// one beyond drops the oldest of its own address, or of the address
	// that has the most.
	MaxPending     int
	MaxSessions    int    // sessions at once (default 64)
	MaxOutputBytes uint64 // bytes of output one session passes on (default DefaultOutputBytes)
	// QuietSessions leaves out the log line for each session that ends
	// (for a daemon that serves one script, whose output says as much).
	QuietSessions bool
	// TotalBytes bounds the memory of every session together (ledger.go);
	// 0: DefaultTotalBytes.
	TotalBytes uint64
	// HelloTimeout bounds a connection's CHALLENGE/HELLO exchange
	// (default HelloTimeout).
	HelloTimeout time.Duration
	// ReapGrace is how long a session may take to end once its parent has
	// left or the daemon is closing, before it is killed (reap.go; default
	// DefaultReapGrace).
	ReapGrace time.Duration
}

// HelloTimeout bounds the handshake of a new connection.
var HelloTimeout = 10 * time.Second

// DefaultLimits are a session's bounds unless the daemon is told others.
// BufferBytes is a placeholder: the CLI sets half of /dev/shm's free space.
var DefaultLimits = wire.Limits{
	BufferBytes: 4 << 30,
	CopyBytes:   wire.MaxCopy,
	QueuedTasks: 1024,
	QueuedBytes: 256 << 20,
	LoadSteps:   10_000_000,
}

// DefaultTotalBytes is the daemon-wide memory bound unless the daemon is
// told another: three quarters of /dev/shm's free space now, where the
// sessions put their memory.
func DefaultTotalBytes() uint64 {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil {
		return 0
	}
	return st.Bavail * uint64(st.Bsize) / 4 * 3
}

// Daemon serves remote L3 sessions. The accepting process does nothing
// for a connection but the handshake until the parent has proved the
// token: it sends the CHALLENGE, reads a HELLO of at most wire.MaxHello
// bytes and checks the proof, with the connections still to send one
// bounded (MaxPending) and the answers to wrong proofs paced (proofGate).
// Only then is the connection handed to a session process of its own (the
// same binary), so a session that fails or a client that misbehaves never
// takes the daemon down; a slot of MaxSessions is taken before the process
// starts, and a session id already live is refused. The process's output
// reaches the daemon's through pipes, tagged and bounded (sessionOutput).
// The daemon keeps a descriptor of each session's connection to see its
// parent leave, and kills a session that has not ended ReapGrace later
// (reap.go). Sessions reach each other's exports through the daemon (the
// link), never by naming shared memory.
type Daemon struct {
	ln   net.Listener
	cfg  DaemonConfig
	id   uint64    // random: export ids name it, and its peer socket is named by it
	peer *peerSock // where other daemons of this user on this host resolve this one's exports
	gate proofGate
	logs logPace       // of refusals
	done chan struct{} // closed by Close
	// mem counts the memory of every session against cfg.TotalBytes;
	// each session process inherits memFile.
	mem     *ledger
	memFile *os.File

	stdout, stderr *lineSink // where sessions' lines go

	mu       sync.Mutex
	pending  pendingConns         // connections that have not sent their proof
	sessions map[uint64]*dsession // running, by slot
	starting int                  // sessions whose slot is taken and whose process is starting
	live     map[uint64]bool      // the session ids of sessions running or starting
	routes   map[uint64]linkRoute // resolves forwarded to an owner, by the daemon's request number
	slots    uint64               // the last slot given out
	reqs     uint64               // the last request number used
	closed   bool
	wg       sync.WaitGroup
}

// NewDaemon serves ln under cfg. A rank of a worker group (ServeRank)
// has no listener: ln is nil, and its one session comes from the
// connection it dialled.
func NewDaemon(ln net.Listener, cfg DaemonConfig) (*Daemon, error) {
	if len(cfg.Token) == 0 {
		return nil, engine.Errorf(engine.ValueError, "remote-l3-worker: a daemon needs a token")
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	cfg.Limits = withDefaults(cfg.Limits)
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 64
	}
	if cfg.MaxOutputBytes == 0 {
		cfg.MaxOutputBytes = DefaultOutputBytes
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 64
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = HelloTimeout
	}
	if cfg.ReapGrace <= 0 {
		cfg.ReapGrace = DefaultReapGrace
	}
	if cfg.TotalBytes == 0 {
		cfg.TotalBytes = DefaultTotalBytes()
	}
	if cfg.TotalBytes == 0 {
		return nil, engine.Errorf(engine.ValueError, "remote-l3-worker: the memory bound of all sessions must be > 0 (/dev/shm has no free space to take a part of)")
	}
	d := &Daemon{ln: ln, cfg: cfg, id: randomID(), done: make(chan struct{}), pending: newPendingConns(cfg.MaxPending),
		sessions: map[uint64]*dsession{}, live: map[uint64]bool{}, routes: map[uint64]linkRoute{}}
	// Twice the entries of the sessions at once: a session's entry is
	// settled only once its process is reaped.
	mem, memFile, err := newLedger(2*cfg.MaxSessions, cfg.TotalBytes)
	if err != nil {
		return nil, err
	}
	d.mem, d.memFile = mem, memFile
	if ls := cfg.Session; ls != nil {
		d.stdout = &lineSink{w: orStd(ls.Stdout, os.Stdout)}
		d.stderr = &lineSink{w: orStd(ls.Stderr, os.Stderr)}
	} else {
		d.stdout, d.stderr = &lineSink{w: os.Stdout}, &lineSink{w: os.Stderr}
	}
	p, err := listenPeer(d.id)
	if err != nil {
		d.closeLedger()
		return nil, engine.Wrap(err, "remote-l3-worker: the socket for peer daemons")
	}
	d.peer = p
	d.wg.Add(2)
	go func() {
		defer d.wg.Done()
		p.serve(d)
	}()
	go d.reap()
	return d, nil
}

// randomID draws a non-zero id from crypto/rand.
func randomID() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:])
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

func withDefaults(l wire.Limits) wire.Limits {
	d := DefaultLimits
	if l.BufferBytes == 0 {
		l.BufferBytes = d.BufferBytes
	}
	if l.CopyBytes == 0 {
		l.CopyBytes = d.CopyBytes
	}
	if l.QueuedTasks == 0 {
		l.QueuedTasks = d.QueuedTasks
	}
	if l.QueuedBytes == 0 {
		l.QueuedBytes = d.QueuedBytes
	}
	if l.LoadSteps == 0 {
		l.LoadSteps = d.LoadSteps
	}
	return l
}

// Serve accepts connections until Close.
func (d *Daemon) Serve() error {
	for {
		conn, err := d.ln.Accept()
		if err != nil {
			d.mu.Lock()
			closed := d.closed
			d.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if !d.addPending(conn) {
			conn.Close()
			continue
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.admit(conn)
		}()
	}
}

// addPending counts conn among the connections that have not sent their
// proof, dropping one when conn passes a bound (pendingConns): a flood of
// idle connections costs a bounded number of descriptors and goroutines,
// and one from a single address drops only its own.
func (d *Daemon) addPending(conn net.Conn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	if drop := d.pending.add(conn, hostOf(conn.RemoteAddr())); drop != nil {
		drop.Close() // its handshake fails at once
	}
	return true
}

// unpend stops counting conn as pending: its HELLO has been read (a
// connection whose refusal is held is bounded by the gate, and dropping it
// would answer its guess early), or it has ended.
func (d *Daemon) unpend(conn net.Conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pending.remove(conn)
}

// admit runs the handshake on conn and starts its session, or refuses it.
func (d *Daemon) admit(conn net.Conn) {
	start, err := d.handshake(conn)
	d.unpend(conn)
	if err == nil {
		_, err = d.startSession(conn, start)
	}
	if err != nil {
		d.logRefusal(conn.RemoteAddr(), err)
		conn.Close()
	}
	// A session's record keeps conn: its process has its own descriptor,
	// and the daemon's tells it when the parent has left (reap.go).
}

// logRefusal logs why a connection was refused, no faster than d.logs
// allows.
func (d *Daemon) logRefusal(from net.Addr, err error) {
	ok, skipped := d.logs.allow(time.Now())
	if !ok {
		return
	}
	more := ""
	if skipped > 0 {
		more = fmt.Sprintf(" (%d more refusals before this one were not logged)", skipped)
	}
	fmt.Fprintf(d.cfg.Log, "simpler remote-l3-worker: refused %s: %v%s\n", from, err, more)
}

// handshake sends the CHALLENGE, reads the HELLO and checks the proof.
// It returns what the session process is started with.
func (d *Daemon) handshake(conn net.Conn) (*wire.Link, error) {
	deadline := time.Now().Add(d.cfg.HelloTimeout)
	conn.SetDeadline(deadline)
	var ch wire.Challenge
	if _, err := rand.Read(ch.Nonce[:]); err != nil {
		return nil, err
	}
	if err := wire.WriteMessage(conn, wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeChallenge}, &ch, nil); err != nil {
		return nil, err
	}
	h, err := wire.ReadHeader(conn, wire.MaxHello)
	if errors.Is(err, wire.ErrVersion) && h.Type == wire.TypeHello {
		return nil, refuse(conn, h, engine.Errorf(engine.ValueError, "HELLO of protocol version %d; this daemon speaks version %d", h.Version, wire.ProtocolVersion))
	}
	if err != nil {
		return nil, err
	}
	if h.Type != wire.TypeHello {
		return nil, fmt.Errorf("first frame is %s, want HELLO", h.Type)
	}
	payload, err := wire.ReadPayload(conn, h, nil)
	if err != nil {
		return nil, err
	}
	d.unpend(conn)
	hello, err := wire.DecodeHello(payload)
	if err != nil {
		return nil, refuse(conn, h, engine.Errorf(engine.ValueError, "HELLO: %v", err))
	}
	if hello.Version < wire.ProtocolVersion {
		return nil, refuse(conn, h, engine.Errorf(engine.ValueError, "HELLO from a parent that speaks protocol version %d; this daemon speaks version %d", hello.Version, wire.ProtocolVersion))
	}
	if err := d.checkProof(conn, h, hello, ch); err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return &wire.Link{Kind: wire.LinkStart, Daemon: d.id, Session: h.Session, Worker: h.Worker, Limits: d.cfg.Limits, Hello: payload}, nil
}

// checkProof checks the HELLO's proof at once; a wrong one is refused no
// sooner than the proof gate allows.
func (d *Daemon) checkProof(conn net.Conn, h wire.Header, hello wire.Hello, ch wire.Challenge) error {
	err := d.gate.decide(hostOf(conn.RemoteAddr()), d.done, func() bool {
		return wire.Verify(d.cfg.Token, ch.Nonce, h.Session, hello.Parent, hello.Proof)
	})
	switch {
	case err == nil:
		return nil
	case err == errGateClosed:
		return errors.New("the daemon is closing")
	case err == errWrongProof:
		// One fixed message: it does not say what was wrong.
		return refuse(conn, h, engine.Errorf(engine.ValueError, "HELLO: the token proof does not match"))
	}
	return refuse(conn, h, err)
}

func hostOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	return a.String()
}

// refuse answers a HELLO with a refused HELLO_REPLY and returns why. The
// reply is written in the parent's protocol version when it is one whose
// HELLO_REPLY layout is this one's (every version so far), so a parent of
// another version can read why it was refused.
func refuse(conn net.Conn, h wire.Header, why error) error {
	body := errBody(why)
	session := h.Session
	if session == 0 {
		session = 1 // a reply must name a session; this one names none
	}
	r := &wire.HelloReply{Session: session, Worker: h.Worker, Version: wire.ProtocolVersion, CommProfile: "sim", Err: body}
	rh := wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeHelloReply, Session: session, Worker: h.Worker}
	if h.Version >= 1 && h.Version <= wire.ProtocolVersion {
		rh.Version = h.Version
	}
	p := wire.Payload(r)
	rh.Length = uint32(len(p))
	hb := wire.EncodeHeader(rh)
	// A refusal held past the handshake's deadline still goes out.
	conn.SetWriteDeadline(time.Now().Add(time.Second))
	conn.Write(append(hb[:], p...))
	return why
}

// Close stops accepting, drops connections still proving, ends the
// session processes and waits for them.
func (d *Daemon) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	d.peer.close()
	for _, c := range d.pending.all() {
		c.Close()
	}
	for _, s := range d.sessions {
		s.cmd.Process.Signal(os.Interrupt)
	}
	d.mu.Unlock()
	var err error
	if d.ln != nil {
		err = d.ln.Close()
	}
	d.wg.Wait()
	d.closeLedger()
	return err
}

func (d *Daemon) closeLedger() {
	d.mem.close()
	d.memFile.Close()
}
