package remote

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"simpler/engine"
	"simpler/hal/dtype"
	"simpler/internal/enginetest"
	"simpler/wire"
)

// Sessions attacked through a real daemon (issue 22): --max-sessions
// raced, a live session id reused, a task flooding and forging output, a
// spawn that fails; and the output lines stepped directly.

// shout is a task that prints a forged daemon log line to stdout and,
// after a carriage return, to stderr, then 8 MiB of lines and one line of
// 3 MiB.
func init() {
	procKernels["shout"] = func(a *engine.TaskArgs, c *engine.ChipCtx, stop *engine.Stopper) error {
		os.Stdout.WriteString(forgedLine)
		os.Stderr.WriteString("\r" + forgedLine)
		chunk := bytes.Repeat([]byte(strings.Repeat("y", 127)+"\n"), 8<<10) // 1 MiB
		for range 8 {
			os.Stdout.Write(chunk)
		}
		os.Stdout.WriteString(strings.Repeat("z", 3<<20) + "\n")
		return nil
	}
}

const forgedLine = "simpler remote-l3-worker: refused 10.0.0.1:1: forged by a task\n"

// A session's lines are cut, escaped and tagged.
func TestSessionLines(t *testing.T) {
	long := strings.Repeat("x", outputLine+10)
	in := "plain\r\n\x1b[2K\rsimpler remote-l3-worker: forged\n" + long + "\nno newline"
	lr := lineReader{r: strings.NewReader(in)}
	var out bytes.Buffer
	for {
		line, cut, err := lr.next()
		if len(line) > 0 || err == nil {
			out.Write(tagLine("[session 1] ", line, cut))
		}
		if err != nil {
			break
		}
	}
	want := "[session 1] plain\n" +
		"[session 1] \\x1b[2K\\x0dsimpler remote-l3-worker: forged\n" +
		"[session 1] " + long[:outputLine] + " [line cut: 10 more bytes]\n" +
		"[session 1] no newline\n"
	if out.String() != want {
		t.Errorf("got\n%q\nwant\n%q", out.String(), want)
	}
	if got := string(appendEscaped(nil, []byte("a\u202eb\xffc\td\u0085"))); got != `a\u202eb\xffc`+"\t"+`d\u0085` {
		t.Errorf("escaped: %q", got)
	}
}

// --max-sessions is taken before the session process starts: 32 proven
// HELLOs at once with a bound of 2 make exactly 2 sessions and 30 typed
// refusals, and once those end a new client is served.
func TestAttackMaxSessionsRace(t *testing.T) {
	d, addr := startDaemonConfig(t, DaemonConfig{MaxSessions: 2})
	tok := defaultToken(t, addr)
	const hellos = 32
	type answer struct {
		r    wire.HelloReply
		conn net.Conn
		err  error
	}
	go_ := make(chan struct{})
	ready := make(chan struct{}, hellos)
	answers := make(chan answer, hellos)
	for range hellos {
		go func() {
			c, err := net.DialTimeout("tcp", addr, deadline)
			if err != nil {
				ready <- struct{}{}
				answers <- answer{err: err}
				return
			}
			ready <- struct{}{}
			r, err := helloOn(c, tok, randomID(), go_)
			answers <- answer{r, c, err}
		}()
	}
	for range hellos {
		<-ready
	}
	close(go_) // every HELLO is sent at once
	var accepted []net.Conn
	refused := 0
	for range hellos {
		a := <-answers
		switch {
		case a.err != nil:
			t.Errorf("a proven HELLO: %v", a.err)
		case a.r.Accepted:
			accepted = append(accepted, a.conn)
		case a.r.Err.Kind == string(engine.RuntimeError) && strings.Contains(a.r.Err.Message, "--max-sessions"):
			refused++
			a.conn.Close()
		default:
			t.Errorf("a proven HELLO refused: %+v", a.r.Err)
			a.conn.Close()
		}
	}
	procs := len(sessionProcs(d))
	for _, c := range accepted {
		c.Close()
	}
	if len(accepted) != 2 || refused != hellos-2 || procs != 2 {
		t.Fatalf("%d accepted, %d refused, %d session processes; want 2, %d, 2", len(accepted), refused, procs, hellos-2)
	}
	poll(t, "the two sessions to end", func() bool { return len(sessionProcs(d)) == 0 })
	w := remoteWorker(t, addr)
	if _, err := outside(w).Malloc(0, 8); err != nil {
		t.Fatal(err)
	}
}

// A HELLO with a session id live in the daemon is refused (the protocol's
// rule), after its proof; another id is served meanwhile, and the id
// itself once its session has ended.
func TestAttackDuplicateSessionID(t *testing.T) {
	d, addr := startDaemon(t)
	tok := defaultToken(t, addr)
	id := randomID()
	first, c1, err := handshakeFrom("", addr, tok, id)
	if err != nil || !first.Accepted {
		t.Fatalf("the first HELLO: %+v %v", first.Err, err)
	}
	dup, c2, err := handshakeFrom("", addr, tok, id)
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	if dup.Accepted || dup.Err.Kind != string(engine.ValueError) || !strings.Contains(dup.Err.Message, "is live in this daemon") {
		t.Errorf("a live session id: %+v", dup.Err)
	}
	// Without the proof, nothing is said about which ids are live.
	if r, c, err := handshakeFrom("", addr, wrongToken, id); err != nil || refusalText(r) != wrongProof {
		t.Errorf("a live session id with a wrong proof: %+v %v", r.Err, err)
	} else {
		c.Close()
	}
	other, c3, err := handshakeFrom("", addr, tok, randomID())
	if err != nil || !other.Accepted {
		t.Fatalf("another id meanwhile: %+v %v", other.Err, err)
	}
	c3.Close()
	c1.Close()
	poll(t, "both sessions to end", func() bool { return len(sessionProcs(d)) == 0 })
	again, c4, err := handshakeFrom("", addr, tok, id)
	if err != nil || !again.Accepted {
		t.Fatalf("the id once its session ended: %+v %v", again.Err, err)
	}
	c4.Close()
}

// syncBuffer is a bytes.Buffer its writers share. It counts the writes
// that are not one whole line.
type syncBuffer struct {
	mu       sync.Mutex
	b        bytes.Buffer
	notLines int
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bytes.IndexByte(p, '\n') != len(p)-1 {
		b.notLines++
	}
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A task's output reaches the daemon's tagged and bounded: every line it
// printed carries its session's tag (a forged daemon log line too, its
// carriage return escaped); past the bound the rest is dropped and one
// line says how much; the daemon serves a new client right after.
func TestAttackSessionOutput(t *testing.T) {
	var stdout, stderr syncBuffer
	const bound = 256 << 10
	_, addr := startDaemonConfig(t, DaemonConfig{Log: &stderr, MaxOutputBytes: bound, Session: &engine.Launcher{Stdout: &stdout, Stderr: &stderr}})
	w := remoteWorker(t, addr)
	register(t, w, nodeOrch{procKernel{"node_shout"}})
	register(t, w, procKernel{"shout"})
	node, _ := w.Registry().Lookup(nodeOrch{procKernel{"node_shout"}}.Digest())
	ref := remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: dtype.Int64}, Ref: engine.RemoteRef{Buf: enginetest.Must(outside(w).Malloc(0, 8))}}
	mustRun(t, w, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(node, mkArgs(ref, engine.InOut), nil, 0)
		return err
	})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	poll(t, "the session's last line", func() bool { return strings.Contains(stderr.String(), "bytes dropped") })
	out, errOut := stdout.String(), stderr.String()
	stdout.mu.Lock()
	stderr.mu.Lock()
	if stdout.notLines+stderr.notLines > 0 {
		t.Errorf("%d writes to the daemon's output were not one whole line", stdout.notLines+stderr.notLines)
	}
	stderr.mu.Unlock()
	stdout.mu.Unlock()
	if len(out) > bound {
		t.Errorf("the daemon's stdout got %d bytes of a session bounded at %d", len(out), bound)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if !sessionTag.MatchString(lines[0]) || !strings.HasSuffix(lines[0], "] "+strings.TrimSuffix(forgedLine, "\n")) {
		t.Errorf("the forged line on stdout reached the daemon as %q", lines[0])
	}
	for _, l := range append(lines, strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")...) {
		if !sessionTag.MatchString(l) && !sessionEnded.MatchString(l) {
			t.Fatalf("an untagged line in the daemon's output: %.100q", l)
		}
	}
	if strings.Contains(errOut, "forged") && !strings.Contains(errOut, `] \x0dsimpler remote-l3-worker: refused 10.0.0.1:1: forged`) {
		t.Errorf("the forged line on stderr is not escaped: %.300q", errOut)
	}
	var dropped uint64
	for _, l := range strings.Split(errOut, "\n") {
		if i := strings.Index(l, "output beyond its bound of 262144 bytes (--max-output-bytes): "); i >= 0 {
			fmt.Sscanf(l[i:], "output beyond its bound of 262144 bytes (--max-output-bytes): %d bytes dropped", &dropped)
		}
	}
	if printed := uint64(8<<20 + 3<<20); dropped < printed-bound {
		t.Errorf("%d bytes said dropped of %d printed beyond a bound of %d", dropped, printed, bound)
	}
	w2 := remoteWorker(t, addr)
	if _, err := outside(w2).Malloc(0, 8); err != nil {
		t.Fatal(err)
	}
}

// A session process that cannot start gives its slot back and leaves
// nothing behind: with --max-sessions 1, every proven HELLO is refused for
// that reason (never for the bound), and the daemon's descriptors are as
// before.
func TestSessionSpawnFailureGivesBackItsSlot(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tok := []byte("a token for a daemon whose sessions cannot start")
	d, err := NewDaemon(ln, DaemonConfig{Token: tok, MaxSessions: 1, Session: &engine.Launcher{Path: "/nonexistent/simpler-session"}})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- d.Serve() }()
	defer func() {
		d.Close()
		if err := <-served; err != nil {
			t.Errorf("daemon: %v", err)
		}
	}()
	fds := func() int {
		es, _ := os.ReadDir("/proc/self/fd")
		return len(es)
	}
	before := fds()
	for i := range 3 {
		r, c, err := handshakeFrom("", ln.Addr().String(), tok, randomID())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if r.Accepted || r.Err.Kind != string(engine.RuntimeError) || !strings.Contains(r.Err.Message, "the session process did not start") {
			t.Fatalf("HELLO %d: %+v", i, r.Err)
		}
	}
	poll(t, "the daemon's descriptors to be as before", func() bool { return fds() <= before })
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.starting != 0 || len(d.live) != 0 || len(d.sessions) != 0 {
		t.Errorf("after failed starts: %d starting, %d live ids, %d sessions", d.starting, len(d.live), len(d.sessions))
	}
}
