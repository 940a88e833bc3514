package remote

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"simpler/engine"
	"simpler/internal/enginetest"
	"simpler/wire"
)

// The daemon's trust boundary, tried as an attacker would, against a real
// daemon on 127.0.0.1. Each attack is refused with a typed error, and the
// daemon still serves a legitimate client afterwards.

// exportOn exports the whole of a fresh 8-byte buffer on node 0 of w and
// returns the export and its id as a parent relays it.
func exportOn(t *testing.T, w *engine.Worker) (*Export, wire.ExportID) {
	t.Helper()
	owner, err := outside(w).Malloc(0, 8)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := outside(w).Export(owner, 0, 8, engine.AccessRW)
	if err != nil {
		t.Fatal(err)
	}
	id, err := wire.DecodeExportID(nodeOf(w, 0).lastExport())
	if err != nil {
		t.Fatalf("the export's token is not an export id: %v", err)
	}
	return exp, id
}

// importID sends IMPORT of a raw id to node n, as a misbehaving parent may.
func importID(n *testNode, id []byte) error {
	_, err := n.Control(&wire.Control{Cmd: wire.CmdImport, Token: id, Access: wire.AccessRead})
	return err
}

func wantRefusal(t *testing.T, what string, err error, k engine.Kind, text string) {
	t.Helper()
	if err == nil || engine.KindOf(err) != k || !strings.Contains(err.Error(), text) {
		t.Errorf("%s: got %v, want a %s containing %q", what, err, k, text)
	}
}

// Forged, stale, foreign and replayed export ids resolve to nothing: an
// import learns a buffer only from the table of the session that exported
// it, and only for a session of the same parent.
func TestAttackExportIDs(t *testing.T) {
	_, a := startDaemon(t)
	_, b := startDaemon(t)
	w := remoteWorker(t, a, a, b) // nodes 0 and 1 share a daemon; node 2 is on another
	exp, id := exportOn(t, w)
	n1, n2 := nodeOf(w, 1), nodeOf(w, 2)

	// A legitimate import works within the daemon and across daemons.
	for _, n := range []*testNode{n1, n2} {
		if err := importID(n, id.Bytes()); err != nil {
			t.Fatalf("a legitimate import on %s: %v", n.name, err)
		}
	}
	forged := id
	forged.Secret[0] ^= 1
	wantRefusal(t, "a forged secret", importID(n1, forged.Bytes()), engine.ValueError, "no such export")
	wantRefusal(t, "a forged secret across daemons", importID(n2, forged.Bytes()), engine.ValueError, "no such export")
	noDaemon := id
	noDaemon.Daemon ^= 1
	wantRefusal(t, "an id of no daemon", importID(n1, noDaemon.Bytes()), engine.ValueError, "no daemon on this host made this export")
	noSession := id
	noSession.Slot += 1000
	wantRefusal(t, "an id of no session", importID(n1, noSession.Bytes()), engine.RuntimeError, "has ended")
	// The old token named a shared-memory object; no such thing is taken
	// any more.
	var old wire.Encoder
	old.String("simpler-1-rbuf-1")
	old.Int(8)
	old.U64(0)
	old.U64(8)
	old.U8(3)
	wantRefusal(t, "a name-bearing token", importID(n1, old.Bytes()), engine.ValueError, "malformed export id")

	// Another parent replaying the id it saw on the wire gets nothing,
	// on the same daemon or another.
	other := remoteWorker(t, a, b)
	for _, n := range nodesOf(other) {
		wantRefusal(t, "another parent's replay on "+n.name, importID(n, id.Bytes()), engine.ValueError, "belongs to another parent")
	}

	// Once the buffer is freed, its id is stale.
	if err := Free(exp.Owner()); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, "a stale id", importID(n1, id.Bytes()), engine.ValueError, "no such export")

	// And the daemons still serve: a fresh export imports on every node.
	_, fresh := exportOn(t, w)
	for _, n := range []*testNode{n1, n2} {
		if err := importID(n, fresh.Bytes()); err != nil {
			t.Errorf("a legitimate import after the attacks, on %s: %v", n.name, err)
		}
	}
}

// An export id of a session that has ended is refused by the daemon that
// ran it.
func TestAttackExportOfEndedSession(t *testing.T) {
	d, a := startDaemon(t)
	owner := remoteWorker(t, a)
	_, id := exportOn(t, owner)
	owner.Close()
	poll(t, "the owner's session to end", func() bool { return len(sessionProcs(d)) == 0 })
	w := remoteWorker(t, a)
	wantRefusal(t, "an id of an ended session", importID(nodeOf(w, 0), id.Bytes()), engine.RuntimeError, "has ended")
}

// Bounds after authentication: a 1 TiB malloc and a window beyond the
// session's memory bound are refused; offsets near 2^63 and 2^64, in the
// small and the bulk path, are refused without a panic; and the session
// still works after each.
func TestAttackSessionBounds(t *testing.T) {
	_, addr := startDaemonConfig(t, DaemonConfig{Limits: wire.Limits{BufferBytes: 64 << 20}})
	w := remoteWorker(t, addr)
	n := nodeOf(w, 0)
	_, err := outside(w).Malloc(0, 1<<40)
	wantRefusal(t, "a 1 TiB malloc", err, engine.RuntimeError, "beyond its bound of 67108864")
	big := enginetest.Must(outside(w).Malloc(0, 48<<20))
	_, err = outside(w).Malloc(0, 32<<20)
	wantRefusal(t, "a malloc past the bound", err, engine.RuntimeError, "--max-buffer-bytes")
	if err := Free(big); err != nil {
		t.Fatal(err)
	}
	h := enginetest.Must(outside(w).Malloc(0, 32<<20)) // freed memory is counted back
	ref := wire.BufferRef{ID: h.BufferID, Generation: h.Gen}
	bulk := make([]byte, 2<<20) // above the size read straight into the buffer
	for _, off := range []uint64{1 << 63, ^uint64(0), ^uint64(0) - uint64(len(bulk)) + 1, 32<<20 - 1} {
		_, done, err := n.ControlData(&wire.Control{Cmd: wire.CmdCopyTo, Buffer: ref, Offset: off}, bulk, nil)
		done()
		if err == nil || engine.KindOf(err) != engine.ValueError {
			t.Errorf("a bulk COPY_TO at offset %#x: %v", off, err)
		}
		_, err = n.Control(&wire.Control{Cmd: wire.CmdCopyTo, Buffer: ref, Offset: off, Data: []byte{1}})
		if off >= 32<<20 && (err == nil || engine.KindOf(err) != engine.ValueError) {
			t.Errorf("a COPY_TO at offset %#x: %v", off, err)
		}
		_, err = n.Control(&wire.Control{Cmd: wire.CmdExport, Buffer: ref, Offset: off, NBytes: 2, Access: wire.AccessRead})
		if err == nil || engine.KindOf(err) != engine.ValueError {
			t.Errorf("an EXPORT at offset %#x: %v", off, err)
		}
	}
	// A global domain's windows count against the same bound.
	_, err = n.Control(&wire.Control{Cmd: wire.CmdPrepare, Domain: wire.Domain{ID: 1, Generation: 1, Size: 2,
		Ranks: []wire.DomainRank{{Rank: 0, Worker: 0}, {Rank: 1, Worker: 1}}, WindowSize: 1 << 30}})
	wantRefusal(t, "windows past the bound", err, engine.RuntimeError, "PREPARE")
	// The session is intact: a copy round trip works.
	src := []byte("still serving")
	if err := outside(w).CopyTo(h, src, 100); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, len(src))
	if err := outside(w).CopyFrom(h, dst, 100); err != nil || string(dst) != string(src) {
		t.Fatalf("copy after the attacks: %q %v", dst, err)
	}
}

// A session queues a bounded number of tasks: the ones beyond it fail at
// once, naming the bound, while the first still runs.
func TestAttackQueuedTasks(t *testing.T) {
	_, addr := startDaemonConfig(t, DaemonConfig{Limits: wire.Limits{QueuedTasks: 2}})
	c := dialRaw(t, addr)
	c.control(t, &wire.Control{Cmd: wire.CmdBundle})
	hang := nodeOrch{procKernel{"node_hang"}}
	c.control(t, &wire.Control{Cmd: wire.CmdRegister, Digest: hang.Digest(), Module: "m", Name: hang.Name()})
	c.control(t, &wire.Control{Cmd: wire.CmdRegister, Digest: procKernel{"hang"}.Digest(), Module: "m", Name: "hang"})
	buf := c.control(t, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 8}).Buffer
	task := &wire.Task{Digest: hang.Digest(), Tensors: []wire.TensorArg{{Tag: wire.TagOutputExisting, DType: 7, Shape: []int{1},
		Remote: &wire.RemoteRef{Buffer: buf, Access: wire.AccessReadWrite}}}}
	const sent = 6 // one runs (and hangs), two queue, three are refused
	first := c.seq + 1
	for range sent {
		c.send(t, wire.TypeTask, task)
	}
	for range sent - 3 {
		h, p := c.read(t)
		cm, err := wire.DecodeCompletion(p)
		if err != nil || h.Type != wire.TypeCompletion || cm.Err == nil || !strings.Contains(cm.Err.Message, "queued, its bound") {
			t.Fatalf("completion %s %+v %v", h.Type, cm, err)
		}
		if h.Seq < first+3 {
			t.Errorf("task %d was refused; the first three fit", h.Seq-first+1)
		}
	}
	c.conn.Close() // the session ends its hung task within its grace
}

// rawConn is a parent written by hand, for attacks the real one never
// makes.
type rawConn struct {
	conn    net.Conn
	session uint64 // its own: a daemon refuses a live session id
	seq     uint64
}

// rawSessions numbers raw connections' sessions.
var rawSessions atomic.Uint64

// dialRaw runs the handshake with the daemon's token and expects READY.
func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	rc := &rawConn{conn: c, session: 1<<32 + rawSessions.Add(1)}
	ch := rc.challenge(t)
	hello := &wire.Hello{Version: wire.ProtocolVersion, Parent: 1, Platform: "a2a3sim", DeviceIDs: []int{0}, CommProfile: "sim"}
	hello.Proof = wire.Prove(defaultToken(t, addr), ch.Nonce, rc.session, 1)
	rc.write(t, wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeHello, Session: rc.session}, wire.Payload(hello))
	_, p := rc.read(t)
	if r, err := wire.DecodeHelloReply(p); err != nil || !r.Accepted {
		t.Fatalf("handshake: %+v %v", r, err)
	}
	return rc
}

func (c *rawConn) challenge(t *testing.T) wire.Challenge {
	t.Helper()
	_, p := c.read(t)
	ch, err := wire.DecodeChallenge(p)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func (c *rawConn) write(t *testing.T, h wire.Header, p []byte) {
	t.Helper()
	if err := wire.WriteFrame(c.conn, h, p); err != nil {
		t.Fatal(err)
	}
}

func (c *rawConn) send(t *testing.T, typ wire.Type, m wire.Message) {
	t.Helper()
	c.seq++
	c.write(t, wire.Header{Version: wire.ProtocolVersion, Type: typ, Session: c.session, Seq: c.seq}, wire.Payload(m))
}

func (c *rawConn) read(t *testing.T) (wire.Header, []byte) {
	t.Helper()
	h, p, err := wire.ReadFrame(c.conn, 0)
	if err != nil {
		t.Fatal(err)
	}
	return h, p
}

// control sends a command and returns its successful reply.
func (c *rawConn) control(t *testing.T, m *wire.Control) wire.ControlReply {
	t.Helper()
	c.send(t, wire.TypeControl, m)
	_, p := c.read(t)
	r, err := wire.DecodeControlReply(p)
	if err != nil || r.Err != nil {
		t.Fatalf("%s: %+v %v", m.Cmd, r.Err, err)
	}
	return r
}

// Before a parent proves the token, the daemon does almost nothing for
// it: no session process, a bounded number of connections (the oldest
// dropped), a HELLO no larger than wire.MaxHello, and a clear refusal for
// a parent of another protocol version.
func TestAttackBeforeAuthentication(t *testing.T) {
	d, addr := startDaemonConfig(t, DaemonConfig{MaxPending: 4})
	var idle []net.Conn
	for range 10 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	poll(t, "the daemon to hold at most 4 unauthenticated connections", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.pending.conns) <= 4 && len(d.sessions) == 0
	})
	// The oldest were dropped: after the CHALLENGE, the connection ends.
	idle[0].SetDeadline(time.Now().Add(10 * time.Second))
	wire.ReadFrame(idle[0], 0)
	if _, _, err := wire.ReadFrame(idle[0], 0); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Errorf("the oldest idle connection: %v, want it closed", err)
	}
	// A HELLO announcing 63 MiB is refused by its header, before a byte of
	// it is read.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	rc := &rawConn{conn: c}
	rc.challenge(t)
	hb := wire.EncodeHeader(wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeHello, Session: 1, Length: 63 << 20})
	c.Write(hb[:])
	if _, _, err := wire.ReadFrame(c, 0); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Errorf("a 63 MiB HELLO: %v, want the connection closed", err)
	}
	// A parent of protocol version 1 is told why, in a reply it can read.
	v1 := versionRefusal(t, addr, 1)
	if v1.Accepted || !strings.Contains(v1.Err.Message, "protocol version 1") || !strings.Contains(v1.Err.Message, "speaks version "+strconv.Itoa(int(wire.ProtocolVersion))) {
		t.Errorf("a version-1 HELLO: %+v", v1.Err)
	}
	if n := len(sessionProcs(d)); n != 0 {
		t.Errorf("%d session processes before any proof", n)
	}
	for _, c := range idle {
		c.Close()
	}
	// A legitimate parent is served.
	w := remoteWorker(t, addr)
	if _, err := outside(w).Malloc(0, 8); err != nil {
		t.Fatal(err)
	}
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "truncated"))
}

// versionRefusal sends a HELLO frame of protocol version v and returns the
// daemon's HELLO_REPLY, which must be written in version v.
func versionRefusal(t *testing.T, addr string, v uint16) wire.HelloReply {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	(&rawConn{conn: c}).challenge(t)
	p := make([]byte, 40)
	binary.LittleEndian.PutUint16(p, v)
	hb := wire.EncodeHeader(wire.Header{Version: v, Type: wire.TypeHello, Session: 5, Length: uint32(len(p))})
	c.Write(append(hb[:], p...))
	var rh [wire.HeaderSize]byte
	if _, err := io.ReadFull(c, rh[:]); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint16(rh[4:]); got != v {
		t.Errorf("the refusal is written in version %d, want %d", got, v)
	}
	payload := make([]byte, binary.LittleEndian.Uint32(rh[28:]))
	if _, err := io.ReadFull(c, payload); err != nil {
		t.Fatal(err)
	}
	r, err := wire.DecodeHelloReply(payload)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Wrong proofs from one address are answered slowly: each refusal is held
// for a delay that doubles, so guessing runs at a few tries a second, not
// hundreds; the right token is still accepted afterwards.
func TestAttackProofGuessing(t *testing.T) {
	_, addr := startDaemon(t)
	const guesses = 5
	start := time.Now()
	for i := range guesses {
		r := rawHello(t, addr, []byte("a wrong token, guess "+string(rune('a'+i))), &wire.Hello{Version: wire.ProtocolVersion, Platform: "a2a3sim", DeviceIDs: []int{0}, CommProfile: "sim"})
		if r.Accepted || r.Err.Message != "HELLO: the token proof does not match" {
			t.Fatalf("guess %d: %+v", i, r)
		}
	}
	// The refusals are held 0.1, 0.2, 0.4, 0.8 and 1.6 s.
	if el, min := time.Since(start), 1500*time.Millisecond; el < min {
		t.Errorf("%d wrong proofs took %v, want at least %v", guesses, el, min)
	}
	w := remoteWorker(t, addr)
	if _, err := outside(w).Malloc(0, 8); err != nil {
		t.Fatal(err)
	}
}

// A client refuses a short token before it dials anything.
func TestShortTokenRefused(t *testing.T) {
	w := enginetest.Must(newParent(engine.Config{Level: 4, Platform: sim(t)}))
	defer w.Close()
	_, err := w.AddRemoteWorker(engine.RemoteSpec{Endpoint: "127.0.0.1:7700", Platform: "a2a3sim", DeviceIDs: []int{0}, Token: []byte("short")})
	wantRefusal(t, "a 5-byte token", err, engine.ValueError, "add_remote_worker: the token is 5 bytes, shorter than the minimum of 16")
}
