package remote

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"simpler/engine"
	"simpler/wire"
)

// The memory bounds of sessions and of their daemon, and the frames a
// session refuses or cannot write, tried against a real daemon on
// 127.0.0.1; and the accounting's state machines, stepped directly.

const mib = 1 << 20

// The ledger's decisions, stepped directly: the entries together stay
// within the bound, a refused reservation leaves nothing counted, and
// settling an ended session's entry returns its bytes and frees the entry.
func TestLedgerSteps(t *testing.T) {
	l, f, err := newLedger(2, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defer l.close()
	a, err := l.claim(7)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.claim(8)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.claim(9); err == nil || engine.KindOf(err) != engine.RuntimeError {
		t.Errorf("a third claim of two entries: %v", err)
	}
	if _, ok := a.reserve(60); !ok {
		t.Fatal("60 of 100 refused")
	}
	if total, ok := b.reserve(50); ok || total != 110 {
		t.Errorf("50 more past the bound: ok %v, saw %d, want refused at 110", ok, total)
	}
	if got := l.total(); got != 60 {
		t.Errorf("a refused reservation left %d bytes counted, want 60", got)
	}
	if _, ok := b.reserve(40); !ok {
		t.Error("40 more, to the bound exactly, refused")
	}
	if _, ok := b.reserve(1 << 63); ok {
		t.Error("a reservation above the bound was admitted")
	}
	b.release(40)
	if n := l.settle(7); n != 60 || l.total() != 0 {
		t.Errorf("settling slot 7 returned %d bytes and left %d, want 60 and 0", n, l.total())
	}
	// Its entry is free again, and starts empty.
	c, err := l.claim(10)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.reserve(100); !ok {
		t.Error("the whole bound refused after the settle")
	}
	if n := l.settle(99); n != 0 {
		t.Errorf("settling a session that never claimed returned %d", n)
	}
}

// A mapping's life, stepped: unmapped at once when nobody holds it, or by
// the last holder once retired.
func TestMappingSteps(t *testing.T) {
	var b sbuf
	if !b.retire() {
		t.Error("a buffer nobody holds is not unmapped when freed")
	}
	b = sbuf{}
	b.pin()
	b.pin()
	if b.unpin() {
		t.Error("a live buffer is unmapped when a hold ends")
	}
	b.pin()
	if b.retire() {
		t.Error("a held buffer is unmapped when freed")
	}
	if b.unpin() {
		t.Error("a freed buffer is unmapped while one still holds it")
	}
	if !b.unpin() {
		t.Error("the last hold of a freed buffer does not unmap it")
	}
	// The account counts what is mapped: an owned buffer, its import in
	// the same session, the free of the owner, and the bound holds.
	a := account{bound: 16 * mib}
	for _, n := range []uint64{8 * mib, 8 * mib} {
		if err := a.reserve(n, "IMPORT"); err != nil {
			t.Fatal(err)
		}
	}
	a.release(8 * mib) // the owner freed; its import still maps the memory
	if err := a.reserve(8*mib, "REMOTE_MALLOC"); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, "past the session's bound", a.reserve(1, "IMPORT"), engine.RuntimeError, "beyond its bound of 16777216 (the daemon's --max-buffer-bytes)")
	if a.held != 16*mib {
		t.Errorf("a refusal left %d bytes counted, want %d", a.held, 16*mib)
	}
}

// Hole 3: the loop of REMOTE_MALLOC, EXPORT, IMPORT into the same session
// and REMOTE_FREE once walked around the session's bound (the free
// returned bytes the import kept mapped). Every mapping counts now: the
// loop is refused once what the session maps reaches the bound, and the
// session still serves.
func TestAttackImportLoop(t *testing.T) {
	d, addr := startDaemonConfig(t, DaemonConfig{Limits: wire.Limits{BufferBytes: 16 * mib}})
	w := remoteWorker(t, addr)
	n := nodeOf(w, 0)
	const size = 4 * mib
	var imports []wire.BufferRef
	var refused error
	for i := 0; i < 32 && refused == nil; i++ {
		refused = importLoopStep(n, size, &imports)
	}
	wantRefusal(t, "the loop", refused, engine.RuntimeError, "beyond its bound of 16777216 (the daemon's --max-buffer-bytes)")
	if held := uint64(len(imports)) * size; held > 16*mib {
		t.Errorf("the session mapped %d imported bytes before the refusal, beyond its bound", held)
	}
	if got := d.mem.total(); got > 16*mib {
		t.Errorf("the daemon's ledger counts %d bytes for a session bounded by %d", got, 16*mib)
	}
	if len(imports) == 0 {
		t.Fatal("the first import was refused")
	}
	// Releasing an import returns its bytes: the session serves again.
	if _, err := n.Control(&wire.Control{Cmd: wire.CmdReleaseImport, Buffer: imports[0]}); err != nil {
		t.Fatal(err)
	}
	h, err := outside(w).Malloc(0, size)
	if err != nil {
		t.Fatalf("a malloc after an import was released: %v", err)
	}
	copyRoundTrip(t, w, h)
}

// importLoopStep runs one round of the loop, keeping the import.
func importLoopStep(n *testNode, size uint64, imports *[]wire.BufferRef) error {
	r, err := n.Control(&wire.Control{Cmd: wire.CmdMalloc, NBytes: size})
	if err != nil {
		return err
	}
	owner := r.Buffer
	defer n.Control(&wire.Control{Cmd: wire.CmdFree, Buffer: owner})
	if _, err := n.Control(&wire.Control{Cmd: wire.CmdExport, Buffer: owner, NBytes: size, Access: wire.AccessRead}); err != nil {
		return err
	}
	r, err = n.Control(&wire.Control{Cmd: wire.CmdImport, Token: n.lastExport(), Access: wire.AccessRead})
	if err != nil {
		return err
	}
	*imports = append(*imports, r.Buffer)
	return nil
}

func copyRoundTrip(t *testing.T, w *engine.Worker, h *engine.RemoteBuffer) {
	t.Helper()
	src := []byte("still serving")
	if err := outside(w).CopyTo(h, src, 0); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, len(src))
	if err := outside(w).CopyFrom(h, dst, 0); err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("a copy round trip: %q %v", dst, err)
	}
}

// Two sessions of one daemon are refused together at the daemon-wide
// bound, each within its own; and a session freeing its memory lets the
// other have it.
func TestAttackDaemonWideBound(t *testing.T) {
	d, addr := startDaemonConfig(t, DaemonConfig{Limits: wire.Limits{BufferBytes: 32 * mib}, TotalBytes: 24 * mib})
	w := remoteWorker(t, addr, addr) // two sessions of the same daemon
	a, err := outside(w).Malloc(0, 16*mib)
	if err != nil {
		t.Fatal(err)
	}
	_, err = outside(w).Malloc(1, 12*mib)
	wantRefusal(t, "the second session past the daemon's bound", err, engine.RuntimeError, "beyond their bound of 25165824 (the daemon's --max-total-bytes)")
	b, err := outside(w).Malloc(1, 8*mib)
	if err != nil {
		t.Fatalf("the second session within the daemon's bound: %v", err)
	}
	if got := d.mem.total(); got != 24*mib {
		t.Errorf("the ledger counts %d bytes, want %d", got, 24*mib)
	}
	// An import counts against the importing session, and so against the
	// daemon: 8 MiB of node 0's imported into node 1 does not fit.
	exp, err := outside(w).Export(b, 0, 8*mib, engine.AccessRW)
	if err != nil {
		t.Fatal(err)
	}
	_, err = nodeOf(w, 0).Control(&wire.Control{Cmd: wire.CmdImport, Token: nodeOf(w, 1).lastExport(), Access: wire.AccessRead})
	wantRefusal(t, "an import past the daemon's bound", err, engine.RuntimeError, "--max-total-bytes")
	if err := Free(exp.Owner()); err != nil {
		t.Fatal(err)
	}
	if err := Free(a); err != nil {
		t.Fatal(err)
	}
	h, err := outside(w).Malloc(1, 16*mib)
	if err != nil {
		t.Fatalf("the second session after the first freed: %v", err)
	}
	copyRoundTrip(t, w, h)
}

// A session that crashes returns its bytes to the daemon's ledger: a new
// session can allocate them.
func TestAttackCrashReturnsBytes(t *testing.T) {
	d, addr := startDaemonConfig(t, DaemonConfig{Limits: wire.Limits{BufferBytes: 16 * mib}, TotalBytes: 16 * mib})
	crash := dialRaw(t, addr)
	crash.control(t, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 16 * mib})
	procs := sessionProcs(d)
	if len(procs) != 1 {
		t.Fatalf("%d session processes, want 1", len(procs))
	}
	// While it lives, its bytes are counted: another session gets none.
	other := dialRaw(t, addr)
	other.send(t, wire.TypeControl, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 1})
	_, p := other.read(t)
	r, err := wire.DecodeControlReply(p)
	if err != nil || r.Err == nil || !strings.Contains(r.Err.Message, "--max-total-bytes") {
		t.Fatalf("a malloc beside a session holding the daemon's bound: %+v %v", r.Err, err)
	}
	other.conn.Close()
	procs[0].Signal(syscall.SIGKILL)
	poll(t, "the killed session to be settled", func() bool { return len(sessionProcs(d)) == 0 })
	if got := d.mem.total(); got != 0 {
		t.Errorf("the ledger counts %d bytes after every session ended", got)
	}
	w := remoteWorker(t, addr)
	h, err := outside(w).Malloc(0, 16*mib)
	if err != nil {
		t.Fatalf("a new session after the crash: %v", err)
	}
	copyRoundTrip(t, w, h)
}

// Hole 13: a frame that carries another session's id is not served: the
// session tells the parent why in a SHUTDOWN and ends, and the daemon
// serves the next parent.
func TestAttackForeignSessionFrame(t *testing.T) {
	d, addr := startDaemon(t)
	c := dialRaw(t, addr)
	buf := c.control(t, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 8}).Buffer
	c.control(t, &wire.Control{Cmd: wire.CmdCopyTo, Buffer: buf, Data: []byte("original")})
	// A COPY_TO under another session id is not served.
	c.seq++
	c.write(t, wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeControl, Session: c.session + 1, Seq: c.seq},
		wire.Payload(&wire.Control{Cmd: wire.CmdCopyTo, Buffer: buf, Data: []byte("injected")}))
	h, p := c.read(t)
	if h.Type != wire.TypeShutdown {
		t.Fatalf("the reply to a foreign frame is %s, want SHUTDOWN", h.Type)
	}
	sd, err := wire.DecodeShutdown(p)
	want := fmt.Sprintf("protocol error: a CONTROL frame of session %d on the connection of session %d", c.session+1, c.session)
	if err != nil || sd.Reason != want {
		t.Errorf("SHUTDOWN %q %v, want %q", sd.Reason, err, want)
	}
	if _, _, err := wire.ReadFrame(c.conn, 0); err == nil {
		t.Error("the connection stays open after the protocol error")
	}
	poll(t, "the session to end", func() bool { return len(sessionProcs(d)) == 0 })
	if got := d.mem.total(); got != 0 {
		t.Errorf("the ended session left %d bytes in the ledger", got)
	}
	w := remoteWorker(t, addr)
	h2, err := outside(w).Malloc(0, 64)
	if err != nil {
		t.Fatal(err)
	}
	copyRoundTrip(t, w, h2)
}

// Hole 13: a REMOTE_FREE pipelined behind a 64 MiB COPY_FROM once
// unmapped the buffer under the reply being written, which was cut in the
// middle and its error dropped. The reply holds the buffer now: both
// replies come whole, in order, and the freed memory goes once the reply
// is out.
func TestAttackFreeBehindCopyFrom(t *testing.T) {
	d, addr := startDaemon(t)
	c := dialRaw(t, addr)
	c.conn.SetDeadline(time.Now().Add(deadline))
	const size = 64 * mib
	buf := c.control(t, &wire.Control{Cmd: wire.CmdMalloc, NBytes: size}).Buffer
	pattern := make([]byte, size)
	for i := range pattern {
		pattern[i] = byte(i*7 + i>>16)
	}
	c.control(t, &wire.Control{Cmd: wire.CmdCopyTo, Buffer: buf, Data: pattern})
	c.send(t, wire.TypeControl, &wire.Control{Cmd: wire.CmdCopyFrom, Buffer: buf, NBytes: size})
	copySeq := c.seq
	c.send(t, wire.TypeControl, &wire.Control{Cmd: wire.CmdFree, Buffer: buf})
	freeSeq := c.seq
	// The reply cannot fit the sockets' buffers, so it waits for this
	// reader; meanwhile the session reads the REMOTE_FREE on (its reader
	// hands on while the reply waits). Wait until it has read every byte.
	poll(t, "the session to read the pipelined REMOTE_FREE", func() bool { return unreadBytes(t, c.conn) == 0 })
	h, p, err := wire.ReadFrame(c.conn, 0)
	if err != nil {
		t.Fatalf("the COPY_FROM reply: %v (cut in the middle?)", err)
	}
	r, err := wire.DecodeControlReply(p)
	if err != nil || h.Seq != copySeq || r.Err != nil || !bytes.Equal(r.Data, pattern) {
		t.Fatalf("the COPY_FROM reply: seq %d (want %d), %d bytes, %+v %v", h.Seq, copySeq, len(r.Data), r.Err, err)
	}
	h, p, err = wire.ReadFrame(c.conn, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := wire.DecodeControlReply(p); err != nil || h.Seq != freeSeq || r.Err != nil {
		t.Fatalf("the REMOTE_FREE reply: seq %d (want %d), %+v %v", h.Seq, freeSeq, r.Err, err)
	}
	poll(t, "the freed buffer to leave the ledger", func() bool { return d.mem.total() == 0 })
	// The same session serves on.
	buf = c.control(t, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 8}).Buffer
	c.control(t, &wire.Control{Cmd: wire.CmdCopyTo, Buffer: buf, Data: []byte("serving!")})
	if got := c.control(t, &wire.Control{Cmd: wire.CmdCopyFrom, Buffer: buf, NBytes: 8}).Data; string(got) != "serving!" {
		t.Errorf("a copy after the pipelined free: %q", got)
	}
}

// unreadBytes is how many bytes the daemon's end of conn has received and
// not yet read (the rx_queue of /proc/net/tcp): the session process holds
// that end, so this is how far it has read.
func unreadBytes(t *testing.T, conn net.Conn) int {
	t.Helper()
	local := conn.LocalAddr().(*net.TCPAddr)
	remote := conn.RemoteAddr().(*net.TCPAddr)
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The daemon's end: its local address is conn's remote one.
	want := fmt.Sprintf("%s %s", procAddr(remote), procAddr(local))
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 || fs[1]+" "+fs[2] != want {
			continue
		}
		_, rx, _ := strings.Cut(fs[4], ":")
		n, err := strconv.ParseInt(rx, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		return int(n)
	}
	t.Fatalf("no socket %s in /proc/net/tcp", want)
	return 0
}

// procAddr is a 127.0.0.1 address as /proc/net/tcp writes it.
func procAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], a.Port)
}

// A reply that cannot be written whole ends the session: nothing is
// written after the cut (it could not be read right), the connection is
// closed, the buffer the reply held is let go, and serve returns why.
// Stepped on a session whose connection takes 1000 bytes and then fails.
func TestWriteErrorEndsSession(t *testing.T) {
	s := fuzzSession(t)
	defer s.close()
	conn := &cutConn{room: 1000}
	s.conn = conn
	step := func(seq uint64, c *wire.Control) {
		s.control(frame{h: wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeControl, Session: 1, Seq: seq}, payload: wire.Payload(c), done: func() {}})
	}
	step(1, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 1 << 16})
	if conn.closed || s.writeFailure() != nil {
		t.Fatal("a reply that fits failed")
	}
	buf := wire.BufferRef{ID: 1, Generation: 1}
	step(2, &wire.Control{Cmd: wire.CmdCopyFrom, Buffer: buf, NBytes: 1 << 16})
	err := s.writeFailure()
	if err == nil || !strings.Contains(err.Error(), "could not be written whole, so the session ends") || !conn.closed {
		t.Fatalf("a cut reply: %v, connection closed %v", err, conn.closed)
	}
	written := conn.written
	step(3, &wire.Control{Cmd: wire.CmdFree, Buffer: buf})
	if conn.written != written {
		t.Errorf("%d bytes were written after the cut", conn.written-written)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.retired) != 0 || len(s.bufs) != 0 || s.mem.held != 0 {
		t.Errorf("after the free: %d retired, %d buffers, %d bytes held", len(s.retired), len(s.bufs), s.mem.held)
	}
}

// cutConn takes room bytes and then fails every write.
type cutConn struct {
	discardConn
	room, written int
	closed        bool
}

func (c *cutConn) Write(b []byte) (int, error) {
	if c.written+len(b) > c.room {
		n := c.room - c.written
		c.written = c.room
		return n, syscall.EPIPE
	}
	c.written += len(b)
	return len(b), nil
}

func (c *cutConn) Close() error {
	c.closed = true
	return nil
}

// A parent that resets its connection in the middle of a 64 MiB reply
// ends its session: the session process exits, its memory leaves the
// daemon's ledger, and the daemon serves the next parent.
func TestAttackReplyCut(t *testing.T) {
	d, addr := startDaemon(t)
	c := dialRaw(t, addr)
	buf := c.control(t, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 64 * mib}).Buffer
	c.send(t, wire.TypeControl, &wire.Control{Cmd: wire.CmdCopyFrom, Buffer: buf, NBytes: 64 * mib})
	if _, err := wire.ReadHeader(c.conn, 0); err != nil {
		t.Fatal(err)
	}
	c.conn.(*net.TCPConn).SetLinger(0) // a reset, not a clean end
	c.conn.Close()
	poll(t, "the session to end", func() bool { return len(sessionProcs(d)) == 0 })
	if got := d.mem.total(); got != 0 {
		t.Errorf("the ended session left %d bytes in the ledger", got)
	}
	w := remoteWorker(t, addr)
	h, err := outside(w).Malloc(0, 64*mib)
	if err != nil {
		t.Fatal(err)
	}
	copyRoundTrip(t, w, h)
}

// A REMOTE_FREE of a buffer a running task names (a parent that does not
// wait for the task's fence) takes it out of the table at once; the
// memory stays mapped, and counted, until the task ends, so the kernel's
// result lands in mapped memory and the session serves on.
func TestAttackFreeUnderTask(t *testing.T) {
	d, addr := startDaemon(t)
	c := dialRaw(t, addr)
	c.control(t, &wire.Control{Cmd: wire.CmdBundle})
	spin := nodeOrch{procKernel{"node_spin"}}
	c.control(t, &wire.Control{Cmd: wire.CmdRegister, Digest: spin.Digest(), Module: "m", Name: spin.Name()})
	c.control(t, &wire.Control{Cmd: wire.CmdRegister, Digest: procKernel{"spin"}.Digest(), Module: "m", Name: "spin"})
	buf := c.control(t, &wire.Control{Cmd: wire.CmdMalloc, NBytes: mib}).Buffer
	c.send(t, wire.TypeTask, &wire.Task{Digest: spin.Digest(), Tensors: []wire.TensorArg{{Tag: wire.TagInOut, DType: 7, Shape: []int{1},
		Remote: &wire.RemoteRef{Buffer: buf, Access: wire.AccessReadWrite}}}})
	taskSeq := c.seq
	// Read after the task, so the task holds the buffer when it is freed.
	if r := c.control(t, &wire.Control{Cmd: wire.CmdFree, Buffer: buf}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := d.mem.total(); got != mib {
		t.Errorf("the ledger counts %d bytes while the task holds the freed buffer, want %d", got, mib)
	}
	c.send(t, wire.TypeControl, &wire.Control{Cmd: wire.CmdCancel, TaskSeq: taskSeq})
	for seen := 0; seen < 2; seen++ {
		h, p := c.read(t)
		switch h.Type {
		case wire.TypeCompletion:
			cm, err := wire.DecodeCompletion(p)
			if err != nil || cm.Err == nil || !strings.Contains(cm.Err.Message, "cancelled") {
				t.Errorf("the cancelled task's completion: %+v %v", cm.Err, err)
			}
		case wire.TypeControlReply:
		default:
			t.Fatalf("a %s frame", h.Type)
		}
	}
	poll(t, "the freed buffer to leave the ledger once the task ended", func() bool { return d.mem.total() == 0 })
	b := c.control(t, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 8}).Buffer
	c.control(t, &wire.Control{Cmd: wire.CmdCopyTo, Buffer: b, Data: []byte("serving!")})
	if got := c.control(t, &wire.Control{Cmd: wire.CmdCopyFrom, Buffer: b, NBytes: 8}).Data; string(got) != "serving!" {
		t.Errorf("a copy after the task: %q", got)
	}
}
