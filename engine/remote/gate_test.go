package remote

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"simpler/engine"
	"simpler/hal/dtype"
	"simpler/wire"
)

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

var (
	right = func() bool { return true }
	wrong = func() bool { return false }
)

// The gate's decisions, stepped directly: a right proof is admitted
// whatever came before it; a wrong one's refusal is held for its
// address's delay; held refusals are bounded per address, and a proof
// beyond is refused unchecked with the time until the first goes; a
// failure is forgotten after gateForget.
func TestProofGateSteps(t *testing.T) {
	var g proofGate
	t0 := time.Unix(1000, 0)
	for k := 1; k <= gateHeldAddr; k++ {
		v, at := g.check("a", t0, wrong)
		if v != gateHold || !at.Equal(t0.Add(gateDelay(k))) {
			t.Fatalf("wrong proof %d: %v until %v, want held %v", k, v, at.Sub(t0), gateDelay(k))
		}
	}
	// Four refusals are held for "a": a right proof from it is refused
	// unchecked, with the real wait; another address is not.
	checked := false
	if v, at := g.check("a", t0.Add(30*time.Millisecond), func() bool { checked = true; return true }); v != gateBusy || checked || !at.Equal(t0.Add(gateBase)) {
		t.Errorf("a proof beyond the held bound: %v until %v, checked %v", v, at.Sub(t0), checked)
	}
	if v, _ := g.check("b", t0, right); v != gateAdmit {
		t.Errorf("another address's right proof: %v", v)
	}
	// The first refusal goes: a right proof from "a" is admitted at once.
	g.release("a", t0.Add(gateBase))
	if v, at := g.check("a", t0.Add(gateBase), right); v != gateAdmit || !at.Equal(t0.Add(gateBase)) {
		t.Errorf("a right proof after wrong ones: %v at %v", v, at.Sub(t0))
	}
	// The address keeps its failures: the next wrong proof is its fifth.
	v, at := g.check("a", t0.Add(gateBase), wrong)
	if v != gateHold || !at.Equal(t0.Add(gateBase+gateDelay(5))) {
		t.Errorf("a fifth wrong proof: %v held %v", v, at.Sub(t0.Add(gateBase)))
	}
	if d := gateDelay(21); d != gateMax {
		t.Errorf("the delay after 21 failures is %v, want the cap %v", d, gateMax)
	}
	// Once its refusals have gone and gateForget has passed, an address
	// starts again.
	for _, h := range append([]time.Time(nil), g.addrs["a"].held...) {
		g.release("a", h)
	}
	if g.held != 0 {
		t.Fatalf("%d refusals held after all were released", g.held)
	}
	later := t0.Add(gateForget + time.Minute)
	if v, at := g.check("a", later, wrong); v != gateHold || !at.Equal(later.Add(gateBase)) {
		t.Errorf("after gateForget: %v held %v", v, at.Sub(later))
	}
}

// Wrong proofs from many addresses share one budget: after gateBurst, one
// per gateInterval, whatever the addresses; and the gate holds at most
// gateHeld refusals, refusing the next proof unchecked with the real wait.
func TestProofGateGlobalBudget(t *testing.T) {
	var g proofGate
	t0 := time.Unix(1000, 0)
	var last time.Time
	for i := range gateHeld {
		v, at := g.check(fmt.Sprintf("127.0.0.%d", i+2), t0, wrong)
		if v != gateHold {
			t.Fatalf("proof %d: %v", i, v)
		}
		want := t0.Add(gateBase) // every address's first delay
		if i >= gateBurst {
			want = t0.Add(time.Duration(i-gateBurst+1) * gateInterval)
		}
		if want.Before(t0.Add(gateBase)) {
			want = t0.Add(gateBase)
		}
		if !at.Equal(want) {
			t.Errorf("proof %d from a fresh address is held until %v, want %v", i, at.Sub(t0), want.Sub(t0))
		}
		last = at
	}
	// Guessing from gateHeld addresses at once: the answers span
	// (gateHeld - gateBurst) intervals.
	if span := last.Sub(t0); span < time.Duration(gateHeld-gateBurst)*gateInterval {
		t.Errorf("%d wrong proofs at once are answered within %v", gateHeld, span)
	}
	if v, at := g.check("10.0.0.1", t0, right); v != gateBusy || !at.Equal(t0.Add(gateBase)) {
		t.Errorf("a proof beyond gateHeld: %v until %v", v, at.Sub(t0))
	}
	// A failure budget spent long ago is whole again.
	g = proofGate{}
	for range gateBurst {
		g.check("c", t0, wrong)
	}
	if at := g.spend(t0.Add(time.Hour)); !at.Equal(t0.Add(time.Hour)) {
		t.Errorf("the budget an hour later: held %v", at.Sub(t0.Add(time.Hour)))
	}
}

// The gate remembers at most gateAddrs addresses: beyond, it forgets the
// stalest one (not everyone), and never one whose refusals are held.
func TestProofGateForgetsTheStalest(t *testing.T) {
	var g proofGate
	t0 := time.Unix(1000, 0)
	g.check("held", t0, wrong) // held until released
	for i := range gateAddrs - 1 {
		a := fmt.Sprintf("a%d", i)
		g.check(a, t0.Add(time.Duration(i+1)*time.Millisecond), wrong)
		g.release(a, g.addrs[a].held[0])
	}
	g.check("new", t0.Add(time.Hour), wrong)
	if len(g.addrs) != gateAddrs {
		t.Fatalf("%d addresses remembered, want %d", len(g.addrs), gateAddrs)
	}
	if g.addrs["held"] == nil || g.addrs["a0"] != nil || g.addrs["a1"] == nil {
		t.Errorf("forgot the wrong address: held %v, a0 %v, a1 %v", g.addrs["held"] != nil, g.addrs["a0"] != nil, g.addrs["a1"] != nil)
	}
}

// fakeConn is a net.Conn the pending set can tell apart.
type fakeConn struct {
	net.Conn
	n int
}

// Pending connections, stepped: a flood from one address drops only its
// own oldest; at the total bound, the address with the most loses its
// oldest.
func TestPendingConnsSteps(t *testing.T) {
	p := newPendingConns(8) // 4 per address
	conn := func(n int) net.Conn { return &fakeConn{n: n} }
	legit := conn(0)
	if drop := p.add(legit, "legit"); drop != nil {
		t.Fatal("the first connection dropped one")
	}
	flood := []net.Conn{}
	for i := 1; i <= 20; i++ {
		c := conn(i)
		drop := p.add(c, "flood")
		flood = append(flood, c)
		if i > 4 && drop != flood[i-5] {
			t.Fatalf("flood connection %d dropped %v, want the flood's oldest", i, drop)
		}
	}
	if p.count("legit") != 1 || p.count("flood") != 4 {
		t.Errorf("after the flood: legit %d, flood %d", p.count("legit"), p.count("flood"))
	}
	// Three more addresses fill the total: the next drops the flood's
	// oldest, not legit's.
	p.add(conn(100), "b")
	p.add(conn(101), "c")
	p.add(conn(102), "c")
	if drop := p.add(conn(103), "d"); drop != flood[16] {
		t.Errorf("at the total bound: dropped %v, want the flood's oldest", drop)
	}
	p.remove(legit)
	if p.count("legit") != 0 || len(p.all()) != 7 {
		t.Errorf("after remove: %d pending", len(p.all()))
	}
}

// Refusal lines, stepped: logBurst at once, then one per logInterval,
// the next one logged counting those held back.
func TestLogPaceSteps(t *testing.T) {
	var p logPace
	t0 := time.Unix(1000, 0)
	for i := range logBurst {
		if ok, _ := p.allow(t0); !ok {
			t.Fatalf("line %d of the burst held back", i)
		}
	}
	for range 5 {
		if ok, _ := p.allow(t0.Add(logInterval / 2)); ok {
			t.Fatal("a line past the burst was logged")
		}
	}
	if ok, skipped := p.allow(t0.Add(logInterval)); !ok || skipped != 5 {
		t.Errorf("a line an interval later: %v, %d held back before it; want true, 5", ok, skipped)
	}
	if ok, _ := p.allow(t0.Add(logInterval)); ok {
		t.Error("two lines in one interval past the burst")
	}
}

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

// handshakeFrom runs a HELLO by hand from the source address local (a
// 127/8 address; "" for any) with a proof made from tok for session, and
// returns the daemon's HELLO_REPLY and the connection, left open (a
// session accepted on it runs until it closes).
func handshakeFrom(local, addr string, tok []byte, session uint64) (wire.HelloReply, net.Conn, error) {
	dialer := net.Dialer{Timeout: deadline}
	if local != "" {
		dialer.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	c, err := dialer.Dial("tcp", addr)
	if err != nil {
		return wire.HelloReply{}, nil, err
	}
	r, err := helloOn(c, tok, session, nil)
	if err != nil {
		c.Close()
		return r, nil, err
	}
	return r, c, nil
}

// helloOn reads the CHALLENGE on c, waits for go_ to close (nil: not at
// all), sends the HELLO and reads the reply.
func helloOn(c net.Conn, tok []byte, session uint64, go_ <-chan struct{}) (wire.HelloReply, error) {
	c.SetDeadline(time.Now().Add(deadline))
	_, p, err := wire.ReadFrame(c, 0)
	if err != nil {
		return wire.HelloReply{}, err
	}
	ch, err := wire.DecodeChallenge(p)
	if err != nil {
		return wire.HelloReply{}, err
	}
	if go_ != nil {
		<-go_
	}
	hello := &wire.Hello{Version: wire.ProtocolVersion, Parent: 1, Platform: "a2a3sim", DeviceIDs: []int{0}, CommProfile: "sim"}
	hello.Proof = wire.Prove(tok, ch.Nonce, session, hello.Parent)
	if err := wire.WriteFrame(c, wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeHello, Session: session}, wire.Payload(hello)); err != nil {
		return wire.HelloReply{}, err
	}
	h, p, err := wire.ReadFrame(c, 0)
	if err != nil {
		return wire.HelloReply{}, err
	}
	if h.Type != wire.TypeHelloReply {
		return wire.HelloReply{}, fmt.Errorf("the daemon answered HELLO with %s", h.Type)
	}
	return wire.DecodeHelloReply(p)
}

var wrongToken = []byte("a wrong token of enough bytes")

// guess sends a wrong proof from local and returns the refusal's message
// and how long it took.
func guess(t *testing.T, local, addr string) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	r, c, err := handshakeFrom(local, addr, wrongToken, randomID())
	if err != nil {
		t.Fatalf("a guess from %s: %v", local, err)
	}
	c.Close()
	if r.Accepted {
		t.Fatalf("a wrong proof from %s was accepted", local)
	}
	return r.Err.Message, time.Since(start)
}

// heldFor is when each refusal the daemon holds for addr goes.
func heldFor(d *Daemon, addr string) []time.Time {
	d.gate.mu.Lock()
	defer d.gate.mu.Unlock()
	if a := d.gate.addrs[addr]; a != nil {
		return append([]time.Time(nil), a.held...)
	}
	return nil
}

const wrongProof = "HELLO: the token proof does not match"

// Wrong proofs from 127.0.0.1 do not lock out a right one from the same
// address: it is served at once, while refusals of wrong ones are still
// held; each wrong one is answered only after its address's delay; and a
// proof refused unchecked (its address holds as many refusals as it may)
// is told the real time until one goes.
func TestAttackWrongProofsDoNotLockOutTheirAddress(t *testing.T) {
	d, addr := startDaemon(t)
	const local = "127.0.0.1"
	for k := 1; k <= 4; k++ {
		msg, took := guess(t, local, addr)
		if msg != wrongProof || took < gateDelay(k) {
			t.Fatalf("wrong proof %d: %q after %v, want the fixed refusal after at least %v", k, msg, took, gateDelay(k))
		}
	}
	// Three more at once: their refusals are held 1.6, 3.2 and 6.4 s.
	type answer struct {
		msg  string
		took time.Duration
		err  error
	}
	answers := make(chan answer, 3)
	for range 3 {
		go func() {
			start := time.Now()
			r, c, err := handshakeFrom(local, addr, wrongToken, randomID())
			if err == nil {
				c.Close()
				if r.Accepted {
					err = fmt.Errorf("a wrong proof was accepted")
				}
			}
			answers <- answer{refusalText(r), time.Since(start), err}
		}()
	}
	poll(t, "three refusals held for 127.0.0.1", func() bool { return len(heldFor(d, local)) == 3 })
	start := time.Now()
	w := remoteWorker(t, addr)
	if _, err := w.RemoteMalloc(0, 8); err != nil {
		t.Fatal(err)
	}
	served := time.Since(start)
	if n := len(heldFor(d, local)); n != 3 {
		t.Errorf("a right proof from 127.0.0.1 was served in %v, after %d of the 3 held refusals had gone", served, 3-n)
	}
	a := <-answers
	if a.err != nil || a.msg != wrongProof || a.took < gateDelay(5) {
		t.Fatalf("the first of three held: %q after %v (%v)", a.msg, a.took, a.err)
	}
	// Two more wrong proofs fill the address's bound of held refusals (4):
	// the next proof is not checked, and is told the real wait.
	for range 2 {
		go func() {
			r, c, err := handshakeFrom(local, addr, wrongToken, randomID())
			if err == nil {
				c.Close()
			}
			answers <- answer{refusalText(r), 0, err}
		}()
	}
	poll(t, "four refusals held for 127.0.0.1", func() bool { return len(heldFor(d, local)) == gateHeldAddr })
	first := earliest(heldFor(d, local))
	before := time.Now()
	r, c, err := handshakeFrom(local, addr, defaultToken(t, addr), randomID())
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	wait, ok := waitIn(r)
	if r.Accepted || !ok || r.Err.Kind != string(engine.RuntimeError) {
		t.Fatalf("a proof beyond the held bound: %+v", r.Err)
	}
	if lo, hi := first.Sub(after), roundUp(first.Sub(before)); wait < lo || wait > hi {
		t.Errorf("told to try again in %v; the first held refusal goes in %v..%v", wait, lo, hi)
	}
	// Once that refusal has gone, a right proof from the address is
	// served at once again.
	if a := <-answers; a.err != nil || a.msg != wrongProof {
		t.Fatalf("the second of three held: %q (%v)", a.msg, a.err)
	}
	if r, c, err := handshakeFrom(local, addr, defaultToken(t, addr), randomID()); err != nil || !r.Accepted {
		t.Fatalf("a right proof after the wait: %+v %v", r.Err, err)
	} else {
		c.Close()
	}
}

// refusalText is a refused reply's message ("" when accepted).
func refusalText(r wire.HelloReply) string {
	if r.Err == nil {
		return ""
	}
	return r.Err.Message
}

// waitIn is the wait a refusal names ("try again in 1.6s").
func waitIn(r wire.HelloReply) (time.Duration, bool) {
	if r.Err == nil {
		return 0, false
	}
	_, after, ok := strings.Cut(r.Err.Message, "try again in ")
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(after)
	return d, err == nil
}

// Guessing from many source addresses (every one of 127/8 is this host's)
// is bounded by the one global budget: after gateBurst, one wrong proof
// per gateInterval is answered, whatever the addresses; a legitimate
// client is served right after.
func TestAttackGuessingFromManyAddresses(t *testing.T) {
	_, addr := startDaemon(t)
	const sources = 32
	const attack = 2 * time.Second
	start := time.Now()
	stop := start.Add(attack)
	counts := make(chan int, sources)
	for i := range sources {
		local := fmt.Sprintf("127.0.%d.%d", 1+i/200, 2+i%200)
		go func() {
			n := 0
			for time.Now().Before(stop) {
				r, c, err := handshakeFrom(local, addr, wrongToken, randomID())
				if err != nil {
					break
				}
				c.Close()
				if refusalText(r) == wrongProof {
					n++
				}
			}
			counts <- n
		}()
	}
	guesses := 0
	for range sources {
		guesses += <-counts
	}
	took := time.Since(start)
	// The budget: gateBurst at once, then one per gateInterval.
	bound := gateBurst + int(took/gateInterval) + 1
	t.Logf("%d guesses from %d addresses in %v (%.1f/s)", guesses, sources, took, float64(guesses)/took.Seconds())
	if guesses > bound {
		t.Errorf("%d wrong proofs answered in %v; the global budget allows %d", guesses, took, bound)
	}
	if guesses < sources {
		t.Errorf("only %d guesses were answered: every source should have had one", guesses)
	}
	w := remoteWorker(t, addr)
	if _, err := w.RemoteMalloc(0, 8); err != nil {
		t.Fatal(err)
	}
}

// A flood of bare connections from one address (two threads of them)
// drops only its own: a legitimate client from another address handshakes
// twenty times meanwhile, and every time it is served. The daemon's log
// of the refusals is paced.
func TestAttackPendingFlood(t *testing.T) {
	var log syncBuffer
	start := time.Now()
	d, addr := startDaemonConfig(t, DaemonConfig{Log: &log})
	stop := make(chan struct{})
	flooded := make(chan int, 2)
	for range 2 {
		go func() {
			var open []net.Conn
			n := 0
			defer func() {
				for _, c := range open {
					c.Close()
				}
				flooded <- n
			}()
			dialer := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: deadline}
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := dialer.Dial("tcp", addr)
				if err != nil {
					continue // out of ports for a moment; the daemon is not the cause
				}
				n++
				open = append(open, c)
				if len(open) > 64 {
					open[0].Close()
					open = open[1:]
				}
			}
		}()
	}
	poll(t, "the flood to reach its address's bound", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.pending.count("127.0.0.2") == d.pending.perAddr
	})
	var failed []string
	for i := range 20 {
		r, c, err := handshakeFrom("127.0.0.1", addr, defaultToken(t, addr), randomID())
		if err != nil || !r.Accepted {
			failed = append(failed, fmt.Sprintf("handshake %d: %v %v", i, refusalText(r), err))
			continue
		}
		c.Close()
	}
	close(stop)
	n := <-flooded + <-flooded
	t.Logf("%d bare connections from 127.0.0.2 during 20 handshakes", n)
	if len(failed) > 0 {
		t.Errorf("%d of 20 legitimate handshakes failed during the flood: %s", len(failed), strings.Join(failed, "; "))
	}
	if n < 2*d.cfg.MaxPending {
		t.Errorf("the flood made only %d connections", n)
	}
	// Every dropped connection is a refusal; its lines are paced. (The
	// last dropped fail as the daemon closes, after this count.)
	took := time.Since(start)
	lines := strings.Count(log.String(), "simpler remote-l3-worker: refused ") // not the sessions' end lines
	if bound := logBurst + int(took/logInterval) + 1; lines > bound {
		t.Errorf("%d lines of refusals in %v; the pace allows %d", lines, took, bound)
	}
	if !strings.Contains(log.String(), "more refusals before this one were not logged") {
		t.Errorf("no line counts the refusals held back:\n%.500s", log.String())
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
	if _, err := w.RemoteMalloc(0, 8); err != nil {
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

var sessionTag = regexp.MustCompile(`^\[session [0-9a-f]{16}\] `)

// sessionEnded is the daemon's own line when a session ends: its log,
// which the test shares with the sessions' output.
var sessionEnded = regexp.MustCompile(`^simpler remote-l3-worker: session [0-9a-f]{16} from 127\.0\.0\.1:\d+ ended: exit status 0$`)

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
	node, _ := w.Lookup(nodeOrch{procKernel{"node_shout"}}.Digest())
	ref := engine.Tensor{Shape: []int{1}, DType: dtype.Int64, Remote: &engine.RemoteRef{Buf: must(w.RemoteMalloc(0, 8))}}
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
	if _, err := w2.RemoteMalloc(0, 8); err != nil {
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
