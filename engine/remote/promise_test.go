package remote

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"simpler/engine"
	"simpler/hal/shm"
	"simpler/internal/enginetest"
	"simpler/internal/orphan"
	"simpler/wire"
)

// Promises of docs/security.md that no other test checked, each against a
// real daemon (or a real group listener) on 127.0.0.1, with a legitimate
// client served right after.

// challenged dials addr and reads the CHALLENGE, which must be 32 bytes.
func challenged(t *testing.T, addr string) (net.Conn, wire.Challenge) {
	t.Helper()
	c, ch, err := dialChallenge(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, ch
}

// dialChallenge is challenged for a goroutine of a test: it returns what
// went wrong, and the caller closes the connection.
func dialChallenge(addr string) (net.Conn, wire.Challenge, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, wire.Challenge{}, err
	}
	c.SetDeadline(time.Now().Add(deadline))
	h, p, err := wire.ReadFrame(c, 0)
	if err == nil && (h.Type != wire.TypeChallenge || h.Length != 32) {
		err = fmt.Errorf("a %s of %d bytes, want a CHALLENGE of 32", h.Type, h.Length)
	}
	var ch wire.Challenge
	if err == nil {
		ch, err = wire.DecodeChallenge(p)
	}
	if err != nil {
		c.Close()
		return nil, wire.Challenge{}, fmt.Errorf("the first frame from %s: %v", addr, err)
	}
	return c, ch, nil
}

// helloReply reads a HELLO_REPLY from c.
func helloReply(t *testing.T, c net.Conn) wire.HelloReply {
	t.Helper()
	h, p, err := wire.ReadFrame(c, 0)
	if err != nil || h.Type != wire.TypeHelloReply {
		t.Fatalf("no HELLO_REPLY: %v %v", h.Type, err)
	}
	r, err := wire.DecodeHelloReply(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Each connection gets a CHALLENGE of 32 fresh bytes, so a proof made
// over one connection's nonce, sent whole on another, is refused there
// with the one fixed message and starts no process; on its own connection
// the same HELLO is accepted.
func TestAProofIsGoodOnlyOnItsOwnConnection(t *testing.T) {
	d, addr := startDaemon(t)
	tok := defaultToken(t, addr)
	own, chOwn := challenged(t, addr)
	other, chOther := challenged(t, addr)
	if chOwn.Nonce == chOther.Nonce {
		t.Fatalf("two connections got the same nonce %x", chOwn.Nonce)
	}
	const session, parent = 1<<40 + 3, 11
	hello := &wire.Hello{Version: wire.ProtocolVersion, Parent: parent, Platform: "a2a3sim", DeviceIDs: []int{0}, CommProfile: "sim",
		Proof: wire.Prove(tok, chOwn.Nonce, session, parent)}
	h := wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeHello, Session: session}
	if err := wire.WriteFrame(other, h, wire.Payload(hello)); err != nil {
		t.Fatal(err)
	}
	if r := helloReply(t, other); r.Accepted || r.Err == nil || r.Err.Message != "HELLO: the token proof does not match" {
		t.Errorf("a proof replayed on another connection: %+v", r)
	}
	if n := len(sessionProcs(d)); n != 0 {
		t.Errorf("%d session processes after a replayed proof", n)
	}
	if err := wire.WriteFrame(own, h, wire.Payload(hello)); err != nil {
		t.Fatal(err)
	}
	if r := helloReply(t, own); !r.Accepted {
		t.Errorf("the proof on its own connection: %+v", r.Err)
	}
	own.Close()
	w := remoteWorker(t, addr)
	if _, err := outside(w).Malloc(0, 8); err != nil {
		t.Fatal(err)
	}
}

// waitClosed reads c until the other end closes it and returns how long
// that took from start; it fails the test if c is still open at limit.
func waitClosed(t *testing.T, c net.Conn, start time.Time, limit time.Duration) time.Duration {
	t.Helper()
	c.SetReadDeadline(start.Add(limit))
	var b [64]byte
	for {
		_, err := c.Read(b[:])
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) || isReset(err) {
			return time.Since(start)
		}
		t.Errorf("the connection was not closed within %v: %v", limit, err)
		return time.Since(start)
	}
}

// trickle writes b to c one byte every interval until stop is closed or a
// write fails.
func trickle(c net.Conn, b []byte, interval time.Duration, stop chan struct{}) {
	for _, x := range b {
		if _, err := c.Write([]byte{x}); err != nil {
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(interval):
		}
	}
}

// The CHALLENGE and HELLO exchange has one deadline of HelloTimeout (10
// s) from the connection's arrival: a connection that sends nothing and
// one that trickles its HELLO a byte at a time are both closed at it,
// with no process started for either, while a legitimate parent is
// served meanwhile.
func TestHandshakeHasOneDeadline(t *testing.T) {
	t.Parallel() // waits out the real deadline, beside the other test that does
	if HelloTimeout != 10*time.Second {
		t.Errorf("HelloTimeout is %v; docs/security.md says 10 seconds", HelloTimeout)
	}
	d, addr := startDaemon(t)
	start := time.Now()
	silent, _ := challenged(t, addr)
	slow, _ := challenged(t, addr)
	hb := wire.EncodeHeader(wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeHello, Session: 3, Length: 100})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		trickle(slow, hb[:], 500*time.Millisecond, stop) // 18 s for the header alone
	}()
	defer wg.Wait()
	defer close(stop)

	w := remoteWorker(t, addr)
	if _, err := outside(w).Malloc(0, 8); err != nil {
		t.Fatal(err)
	}
	if n := len(sessionProcs(d)); n != 1 {
		t.Errorf("%d session processes, want the legitimate parent's alone", n)
	}
	limit := HelloTimeout + 5*time.Second
	for _, c := range []struct {
		name string
		conn net.Conn
	}{{"silent", silent}, {"trickling", slow}} {
		el := waitClosed(t, c.conn, start, limit)
		if el < HelloTimeout-100*time.Millisecond {
			t.Errorf("the %s connection was closed after %v, before the %v deadline", c.name, el, HelloTimeout)
		}
		t.Logf("the %s connection was closed %v after it arrived", c.name, el)
	}
	if _, err := outside(w).Malloc(0, 8); err != nil {
		t.Fatal(err)
	}
}

// A session whose parent has gone while its task never returns exits by
// itself within orphan.Grace (2 s), before the daemon's reap grace would
// kill it, and leaves none of its shared-memory objects; the next parent
// is served.
func TestOrphanedSessionWithHungWorkEndsAndFreesItsMemory(t *testing.T) {
	if orphan.Grace != 2*time.Second {
		t.Errorf("orphan.Grace is %v; docs/security.md says 2 seconds", orphan.Grace)
	}
	d, addr := startDaemon(t)
	c := dialRaw(t, addr)
	c.control(t, &wire.Control{Cmd: wire.CmdBundle})
	hang := nodeOrch{procKernel{"node_hang"}}
	c.control(t, &wire.Control{Cmd: wire.CmdRegister, Digest: hang.Digest(), Module: "m", Name: hang.Name()})
	c.control(t, &wire.Control{Cmd: wire.CmdRegister, Digest: procKernel{"hang"}.Digest(), Module: "m", Name: "hang"})
	buf := c.control(t, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 8}).Buffer
	c.control(t, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 1 << 20})
	c.send(t, wire.TypeTask, &wire.Task{Digest: hang.Digest(), Tensors: []wire.TensorArg{{Tag: wire.TagOutputExisting, DType: 7, Shape: []int{1},
		Remote: &wire.RemoteRef{Buffer: buf, Access: wire.AccessReadWrite}}}})
	poll(t, "the hung kernel to start", func() bool {
		r := c.control(t, &wire.Control{Cmd: wire.CmdCopyFrom, Buffer: buf, NBytes: 8})
		return len(r.Data) == 8 && r.Data[0] == 1
	})
	d.mu.Lock()
	var prefix string
	for _, s := range d.sessions {
		prefix = s.prefix
	}
	d.mu.Unlock()
	if left, _ := shm.Leftovers(prefix); prefix == "" || len(left) == 0 {
		t.Fatalf("the session (prefix %q) shows no objects in /dev/shm", prefix)
	}
	if DefaultReapGrace <= orphan.Grace+500*time.Millisecond {
		t.Fatalf("the reap grace %v leaves no room to tell a session that exits from one killed", DefaultReapGrace)
	}
	procs := sessionProcs(d)
	c.conn.Close()
	start := time.Now()
	for !processGone(procs[0].Pid) {
		if el := time.Since(start); el > DefaultReapGrace {
			t.Fatalf("the session outlived its parent by %v, past its grace of %v", el, orphan.Grace)
		}
		time.Sleep(10 * time.Millisecond) // polling the process table
	}
	t.Logf("the session ended %v after its parent left", time.Since(start))
	poll(t, "the session's objects to be gone", func() bool {
		left, _ := shm.Leftovers(prefix)
		return len(left) == 0
	})
	w := remoteWorker(t, addr)
	if _, err := outside(w).Malloc(0, 8); err != nil {
		t.Fatal(err)
	}
}

// peerProbe is a client of a daemon's peer socket, in Python so that
// another user can run it (the test binary lives in a private directory):
// it connects to the abstract name argv[1], sends the bytes argv[2] (hex)
// and prints what came back: "closed", or "reply HEX fds N".
const peerProbe = `import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.settimeout(20)
s.connect("\0" + sys.argv[1])
try:
    s.send(bytes.fromhex(sys.argv[2]))
    data, anc, flags, addr = s.recvmsg(4096, socket.CMSG_SPACE(16))
except (BrokenPipeError, ConnectionResetError):
    data, anc = b"", []
if not data and not anc:
    print("closed")
else:
    print("reply", data.hex(), "fds", sum(len(d) // 4 for (l, t, d) in anc))
`

// A daemon's peer socket, which any local user can reach by its abstract
// name, answers only a process of the daemon's own user (SO_PEERCRED):
// another user (uid 65534) who sends a LINK_RESOLVE for a live export, id
// and parent right, gets the connection closed and nothing else, while
// the same request from the daemon's user is granted the memory; the
// parent is served after.
func TestPeerSocketAnswersOnlyItsOwnUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root, to act as another user (uid 65534)")
	}
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s is needed for a peer-socket client another user can run: %v", python, err)
	}
	_, addr := startDaemon(t)
	c := dialRaw(t, addr) // parent 1
	buf := c.control(t, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 8}).Buffer
	exp := c.control(t, &wire.Control{Cmd: wire.CmdExport, Buffer: buf, NBytes: 8, Access: wire.AccessRead}).Data
	id, err := wire.DecodeExportID(exp)
	if err != nil {
		t.Fatal(err)
	}
	resolve := hex.EncodeToString(wire.Payload(&wire.Link{Kind: wire.LinkResolve, Req: 1, ID: id, Parent: 1}))
	name := strings.TrimPrefix(peerAddr(id.Daemon).Name, "@")
	probe := func(cmd *exec.Cmd) string {
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v: %s", cmd.Args, err, errOut.String())
		}
		return strings.TrimSpace(out.String())
	}

	other := probe(exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", peerProbe, name, resolve))
	if other != "closed" {
		t.Errorf("another user asking the peer socket: %q, want the connection closed with nothing", other)
	}

	own := probe(exec.Command(python, "-c", peerProbe, name, resolve))
	f := strings.Fields(own)
	if len(f) != 4 || f[0] != "reply" || f[3] != "1" {
		t.Fatalf("the daemon's own user asking: %q, want a reply with one descriptor", own)
	}
	raw, _ := hex.DecodeString(f[1])
	g, err := wire.DecodeLink(raw)
	if err != nil || g.Kind != wire.LinkGrant || g.Err != nil || g.NBytes != 8 {
		t.Errorf("the daemon's own user was answered %+v (%v), want a grant of the 8 bytes", g, err)
	}

	c.control(t, &wire.Control{Cmd: wire.CmdCopyTo, Buffer: buf, Data: []byte("afterall")})
	if r := c.control(t, &wire.Control{Cmd: wire.CmdCopyFrom, Buffer: buf, NBytes: 8}); string(r.Data) != "afterall" {
		t.Errorf("the parent reads %q after the probes", r.Data)
	}
}

// A group's listener gives a connection what the daemon gives one: a
// CHALLENGE of 32 bytes, a JOIN header that announces more than
// wire.MaxJoin closed before a byte of it is read, and one deadline of
// HelloTimeout for the JOIN; the rank started after joins and the group
// runs.
func TestGroupListenerBeforeTheProof(t *testing.T) {
	t.Parallel() // waits out the real deadline, beside the other test that does
	gt := newGroupTest(t, engine.GroupSpec{Ranks: 1, Launcher: engine.LauncherNone}, engine.Config{StartupTimeout: 40 * time.Second})
	gt.start = func(addr, tokenFile string) {
		go func() { // the listener accepts once OnListen has returned
			defer gt.startRank(addr, tokenFile, 0, nil)
			start := time.Now()
			silent, _, err := dialChallenge(addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer silent.Close()
			big, _, err := dialChallenge(addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer big.Close()
			hb := wire.EncodeHeader(wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeJoin, Length: wire.MaxJoin + 1})
			big.Write(hb[:])
			if el := waitClosed(t, big, time.Now(), deadline); el > 5*time.Second {
				t.Errorf("a JOIN of %d bytes was closed after %v, want at once", wire.MaxJoin+1, el)
			}
			el := waitClosed(t, silent, start, HelloTimeout+5*time.Second)
			if el < HelloTimeout-100*time.Millisecond {
				t.Errorf("a silent connection was closed after %v, before the %v deadline", el, HelloTimeout)
			}
			t.Logf("the silent connection was closed %v after it arrived", el)
		}()
	}
	gt.init()
	r := enginetest.Must(outside(gt.w).Malloc(gt.ids[0], 8))
	if err := Free(r); err != nil {
		t.Error(err)
	}
	if err := gt.w.Close(); err != nil {
		t.Fatal(err)
	}
}

// A parent that dials a service that is not a simpler daemon is refused
// with an error that names what is wrong and carries none of the bytes
// the service sent (they could be anything of that service's); a real
// daemon is served after.
func TestParentNeverEchoesAnotherServicesBytes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const banner = "SSH-2.0-OpenSSH_9.6 private-banner-0123456789abcdef\r\n"
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte(banner))
		c.SetReadDeadline(time.Now().Add(deadline))
		io.Copy(io.Discard, c) // until the parent hangs up
	}()
	w := enginetest.Must(newParent(engine.Config{Level: 4, Platform: sim(t), StartupTimeout: deadline}))
	enginetest.Must(w.AddRemoteWorker(engine.RemoteSpec{Endpoint: ln.Addr().String(), Platform: "a2a3sim", DeviceIDs: []int{0}, Token: []byte("a-token-of-enough-bytes")}))
	err = w.Init()
	w.Close()
	<-served
	t.Logf("the parent's refusal: %v", err)
	if err == nil || !strings.Contains(err.Error(), "not a simpler frame") {
		t.Errorf("a parent that dialled another service: %v, want a refusal naming a frame that is not simpler's", err)
	}
	if err != nil && (strings.Contains(err.Error(), "OpenSSH") || strings.Contains(err.Error(), "private-banner")) {
		t.Errorf("the refusal echoes the service's bytes: %v", err)
	}
	_, addr := startDaemon(t)
	w2 := remoteWorker(t, addr)
	if _, err := outside(w2).Malloc(0, 8); err != nil {
		t.Fatal(err)
	}
}

// --max-copy-bytes and --max-queued-bytes against a real daemon: a copy
// above the first is a ValueError naming the flag, in either direction,
// and a task whose bytes would take the queue past the second fails at
// once naming both queue flags, while the session goes on serving.
func TestCopyAndQueuedBytesBounds(t *testing.T) {
	_, addr := startDaemonConfig(t, DaemonConfig{Limits: wire.Limits{CopyBytes: 4096, QueuedBytes: 1024}})
	c := dialRaw(t, addr)
	buf := c.control(t, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 64 << 10}).Buffer
	refused := func(m *wire.Control) *wire.ErrorBody {
		c.send(t, wire.TypeControl, m)
		_, p := c.read(t)
		r, err := wire.DecodeControlReply(p)
		if err != nil {
			t.Fatal(err)
		}
		return r.Err
	}
	for _, m := range []*wire.Control{
		{Cmd: wire.CmdCopyTo, Buffer: buf, Data: make([]byte, 4097)},
		{Cmd: wire.CmdCopyFrom, Buffer: buf, NBytes: 4097},
	} {
		if e := refused(m); e == nil || e.Kind != "ValueError" || !strings.Contains(e.Message, "--max-copy-bytes") {
			t.Errorf("a %s of 4097 bytes: %+v, want a ValueError naming --max-copy-bytes", m.Cmd, e)
		}
	}
	c.control(t, &wire.Control{Cmd: wire.CmdCopyTo, Buffer: buf, Data: make([]byte, 4096)})

	c.control(t, &wire.Control{Cmd: wire.CmdBundle})
	hang := nodeOrch{procKernel{"node_hang"}}
	c.control(t, &wire.Control{Cmd: wire.CmdRegister, Digest: hang.Digest(), Module: "m", Name: hang.Name()})
	c.control(t, &wire.Control{Cmd: wire.CmdRegister, Digest: procKernel{"hang"}.Digest(), Module: "m", Name: "hang"})
	task := &wire.Task{Digest: hang.Digest(), Scalars: make([]uint64, 75), Tensors: []wire.TensorArg{{Tag: wire.TagOutputExisting, DType: 7, Shape: []int{1},
		Remote: &wire.RemoteRef{Buffer: buf, Access: wire.AccessReadWrite}}}}
	if n := len(wire.Payload(task)); n <= 512 || 2*n <= 1024 {
		t.Fatalf("a task of %d bytes: one must fit the queue's 1024 bytes and two must not", n)
	}
	c.send(t, wire.TypeTask, task) // runs, and hangs
	poll(t, "the hung kernel to start", func() bool {
		r := c.control(t, &wire.Control{Cmd: wire.CmdCopyFrom, Buffer: buf, NBytes: 8})
		return len(r.Data) == 8 && r.Data[0] == 1
	})
	first := c.seq + 1
	c.send(t, wire.TypeTask, task) // queued: its bytes fit
	c.send(t, wire.TypeTask, task) // refused: the queue would pass 1024 bytes
	h, p := c.read(t)
	cm, err := wire.DecodeCompletion(p)
	if err != nil || h.Type != wire.TypeCompletion || h.Seq != first+1 || cm.Err == nil ||
		!strings.Contains(cm.Err.Message, "--max-queued-bytes") {
		t.Fatalf("the task past the queue's bytes: %s seq %d %+v %v, want task %d refused naming --max-queued-bytes", h.Type, h.Seq, cm.Err, err, first+1)
	}
	if r := c.control(t, &wire.Control{Cmd: wire.CmdCopyFrom, Buffer: buf, NBytes: 8}); len(r.Data) != 8 {
		t.Errorf("the session after the refusals: %+v", r)
	}
	c.conn.Close() // the session ends its hung task within its grace
}

// A first frame other than a HELLO, well formed or not, closes the
// connection with nothing read past its header's type and no process
// started; the next parent is served.
func TestFirstFrameMustBeAHello(t *testing.T) {
	d, addr := startDaemon(t)
	for _, typ := range []wire.Type{wire.TypeControl, wire.TypeTask, wire.TypeHealth} {
		c, _ := challenged(t, addr)
		if err := wire.WriteFrame(c, wire.Header{Version: wire.ProtocolVersion, Type: typ, Session: 5, Seq: 1}, wire.Payload(&wire.Control{Cmd: wire.CmdBundle})); err != nil {
			t.Fatal(err)
		}
		if h, _, err := wire.ReadFrame(c, 0); !errors.Is(err, io.EOF) && !isReset(err) {
			t.Errorf("a first frame of type %s: got %s (%v), want the connection closed", typ, h.Type, err)
		}
	}
	if n := len(sessionProcs(d)); n != 0 {
		t.Errorf("%d session processes without a HELLO", n)
	}
	w := remoteWorker(t, addr)
	if _, err := outside(w).Malloc(0, 8); err != nil {
		t.Fatal(err)
	}
}

// A session takes its code once and first: a REGISTER before BUNDLE is a
// RuntimeError, a second BUNDLE a ValueError, and the session serves on
// after both.
func TestBundleComesFirstAndOnce(t *testing.T) {
	_, addr := startDaemon(t)
	c := dialRaw(t, addr)
	ask := func(m *wire.Control) *wire.ErrorBody {
		c.send(t, wire.TypeControl, m)
		_, p := c.read(t)
		r, err := wire.DecodeControlReply(p)
		if err != nil {
			t.Fatal(err)
		}
		return r.Err
	}
	add1 := procKernel{"add1"}
	register := &wire.Control{Cmd: wire.CmdRegister, Digest: add1.Digest(), Module: "m", Name: "add1"}
	if e := ask(register); e == nil || e.Kind != "RuntimeError" || !strings.Contains(e.Message, "sends BUNDLE first") {
		t.Errorf("a REGISTER before BUNDLE: %+v", e)
	}
	c.control(t, &wire.Control{Cmd: wire.CmdBundle})
	if e := ask(&wire.Control{Cmd: wire.CmdBundle}); e == nil || e.Kind != "ValueError" || !strings.Contains(e.Message, "already has its code") {
		t.Errorf("a second BUNDLE: %+v", e)
	}
	c.control(t, register)
	c.control(t, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 8})
}

// peerImpostor listens, in Python so that another user can run it, on the
// abstract name argv[1] as a daemon's peer socket would, says
// "listening", accepts one connection and says "accepted", then "sent N"
// if the dialler sent N bytes or "nothing" if it hung up first.
const peerImpostor = `import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind("\0" + sys.argv[1])
s.listen(1)
s.settimeout(20)
print("listening", flush=True)
c, _ = s.accept()
print("accepted", flush=True)
c.settimeout(10)
try:
    data = c.recv(4096)
except (ConnectionResetError, socket.timeout):
    data = b""
print("sent", len(data)) if data else print("nothing")
`

// The peer socket's check runs both ways: another user (uid 65534) who
// listens on the name a forged export id points a daemon at is dialled
// and sent nothing, not even the id, and the IMPORT is refused as an id
// no daemon made; the session serves on.
func TestPeerSocketImpostorGetsNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root, to act as another user (uid 65534)")
	}
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s is needed for a peer-socket impostor another user can run: %v", python, err)
	}
	_, addr := startDaemon(t)
	c := dialRaw(t, addr)
	forged := wire.ExportID{Daemon: randomID(), Slot: 1}
	copy(forged.Secret[:], "sixteen bytes!!!")
	imp := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", peerImpostor, strings.TrimPrefix(peerAddr(forged.Daemon).Name, "@"))
	var errOut bytes.Buffer
	imp.Stderr = &errOut
	out, err := imp.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := imp.Start(); err != nil {
		t.Fatal(err)
	}
	defer imp.Wait()
	defer imp.Process.Kill() // a no-op once it has ended by itself
	lines := make(chan string, 4)
	go func() {
		defer close(lines)
		b := make([]byte, 256)
		var got []byte
		for {
			n, err := out.Read(b)
			got = append(got, b[:n]...)
			for {
				i := bytes.IndexByte(got, '\n')
				if i < 0 {
					break
				}
				lines <- string(got[:i])
				got = got[i+1:]
			}
			if err != nil {
				return
			}
		}
	}()
	if l := <-lines; l != "listening" {
		t.Fatalf("the impostor said %q: %s", l, errOut.String())
	}
	c.send(t, wire.TypeControl, &wire.Control{Cmd: wire.CmdImport, Token: forged.Bytes(), Access: wire.AccessRead})
	_, p := c.read(t)
	r, err := wire.DecodeControlReply(p)
	if err != nil || r.Err == nil || r.Err.Kind != "ValueError" || !strings.Contains(r.Err.Message, "no daemon on this host made this export") {
		t.Errorf("an IMPORT of an id pointing at the impostor: %+v %v", r.Err, err)
	}
	var said []string
	for l := range lines {
		said = append(said, l)
	}
	if strings.Join(said, "; ") != "accepted; nothing" {
		t.Errorf("the impostor saw %q (%s), want a connection that sent nothing", said, errOut.String())
	}
	c.control(t, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 8})
}
