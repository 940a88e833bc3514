package remote

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"simpler/engine"
	"simpler/wire"
)

// The proof gate and the pending connections attacked through a real
// daemon on 127.0.0.1 (issue 22): wrong proofs from a client's own
// address, guessing from many addresses, floods of bare connections.

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
	if _, err := outside(w).Malloc(0, 8); err != nil {
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
	if _, err := outside(w).Malloc(0, 8); err != nil {
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
