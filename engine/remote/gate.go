package remote

import (
	"errors"
	"net"
	"sync"
	"time"

	"simpler/kind"
)

// The gate in front of the token: what a connection that has not proved
// the token may cost, and how fast anyone may guess it.
//
// A proof is checked as soon as it arrives: HMAC is cheap, and a right
// proof is never delayed by anything wrong proofs did before it. What
// pacing slows down is the answer to a wrong proof. Its connection is held
// and refused only once both of these allow:
//
//   - its address: the k-th wrong proof from one address (within
//     gateForget of the last) is refused gateDelay(k) after it arrived,
//     100 ms doubling up to 10 s;
//   - every address together: wrong proofs are refused at most one per
//     gateInterval after a burst of gateBurst, however many addresses
//     they come from.
//
// A guess is learnt only from its answer, and held answers are bounded
// (gateHeldAddr per address, gateHeld in all), so the guessing rate is
// bounded by the global budget whatever addresses the guesser rotates
// through. A proof that arrives while its address (or the daemon) holds as
// many refusals as it may is not checked at all: it is refused at once
// with the real time until the first held refusal goes (checking it would
// answer a guess beyond the bound).
//
// proofGate and pendingConns are plain state machines over the times they
// are given, so tests step them directly.

const (
	gateBase     = 100 * time.Millisecond // the delay of an address's first wrong proof
	gateMax      = 10 * time.Second       // an address's delay doubles up to this
	gateForget   = 10 * time.Minute       // an address's failures older than this are forgotten
	gateAddrs    = 4096                   // addresses remembered at most; beyond, the stalest is forgotten
	gateInterval = 100 * time.Millisecond // wrong proofs of all addresses are refused at most one per interval...
	gateBurst    = 10                     // ...after a burst of this many
	gateHeldAddr = 4                      // refusals held for one address at once
	gateHeld     = 64                     // refusals held at once in all
)

// gateDelay is how long the refusal of an address's failures-th wrong
// proof is held.
func gateDelay(failures int) time.Duration {
	if failures <= 0 {
		return 0
	}
	d := gateBase
	for i := 1; i < failures && d < gateMax; i++ {
		d *= 2
	}
	return min(d, gateMax)
}

// proofGate decides what happens to each proof (gateVerdict).
type proofGate struct {
	mu    sync.Mutex
	addrs map[string]*gateAddr
	held  int       // refusals held, over all addresses
	tat   time.Time // the global budget's theoretical arrival time (GCRA): one wrong proof per gateInterval, gateBurst ahead
}

// gateAddr is what the gate remembers of one address.
type gateAddr struct {
	failures int         // wrong proofs within gateForget of the last
	last     time.Time   // the last wrong proof
	held     []time.Time // when each of its held refusals goes
}

// gateVerdict is the gate's answer to one proof.
type gateVerdict int

const (
	gateAdmit gateVerdict = iota // the proof is right
	gateHold                     // the proof is wrong: refuse it at the time given, then call release
	gateBusy                     // not checked: too many refusals are held; the duration given is the real wait
)

// check decides a proof from addr that arrived at now; verify checks it
// (it is called at most once, under the gate's lock: an HMAC). For
// gateHold, at is when the refusal may be sent, and release(addr, at) must
// follow it; for gateBusy, at is when the first held refusal that stands
// in the way goes.
func (g *proofGate) check(addr string, now time.Time, verify func() bool) (gateVerdict, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	a := g.addrs[addr]
	if a != nil && len(a.held) == 0 && now.Sub(a.last) > gateForget {
		delete(g.addrs, addr)
		a = nil
	}
	if a != nil && len(a.held) >= gateHeldAddr {
		return gateBusy, earliest(a.held)
	}
	if g.held >= gateHeld {
		return gateBusy, g.earliestHeld()
	}
	if verify() {
		return gateAdmit, now
	}
	if a == nil {
		a = g.remember(addr, now)
	}
	a.failures++
	a.last = now
	at := now.Add(gateDelay(a.failures))
	if global := g.spend(now); global.After(at) {
		at = global
	}
	a.held = append(a.held, at)
	g.held++
	return gateHold, at
}

// spend takes one wrong proof from the global budget and returns the
// earliest time its refusal may go. Caller holds g.mu.
func (g *proofGate) spend(now time.Time) time.Time {
	if g.tat.Before(now) {
		g.tat = now
	}
	g.tat = g.tat.Add(gateInterval)
	at := g.tat.Add(-gateBurst * gateInterval)
	if at.Before(now) {
		return now
	}
	return at
}

// remember makes the record of a new address, forgetting the stalest one
// without held refusals when gateAddrs are remembered already (there is
// always one: gateHeld < gateAddrs). Caller holds g.mu.
func (g *proofGate) remember(addr string, now time.Time) *gateAddr {
	if g.addrs == nil {
		g.addrs = map[string]*gateAddr{}
	}
	if len(g.addrs) >= gateAddrs {
		stalest := ""
		for k, a := range g.addrs {
			if len(a.held) == 0 && (stalest == "" || a.last.Before(g.addrs[stalest].last)) {
				stalest = k
			}
		}
		delete(g.addrs, stalest)
	}
	a := &gateAddr{}
	g.addrs[addr] = a
	return a
}

// release says a refusal held for addr until at has gone (or its
// connection has ended).
func (g *proofGate) release(addr string, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	a := g.addrs[addr]
	if a == nil {
		return
	}
	for i, t := range a.held {
		if t.Equal(at) {
			a.held = append(a.held[:i], a.held[i+1:]...)
			g.held--
			return
		}
	}
}

// earliestHeld is when the first held refusal of any address goes.
// Caller holds g.mu.
func (g *proofGate) earliestHeld() time.Time {
	var first time.Time
	for _, a := range g.addrs {
		if len(a.held) > 0 {
			if t := earliest(a.held); first.IsZero() || t.Before(first) {
				first = t
			}
		}
	}
	return first
}

func earliest(ts []time.Time) time.Time {
	first := ts[0]
	for _, t := range ts[1:] {
		if t.Before(first) {
			first = t
		}
	}
	return first
}

// errGateClosed is a held refusal given up because its server is closing.
var errGateClosed = errors.New("closing")

// errTooManyProofs is the refusal of a proof the gate did not check, with
// the real time until it would be checked.
func errTooManyProofs(addr string, wait time.Duration) error {
	return kind.Errorf(kind.RuntimeError, "too many wrong token proofs from %s are waiting for their refusals; this proof was not checked: try again in %v", addr, roundUp(wait))
}

// roundUp is d rounded up to a tenth of a second: a wait is never said to
// be shorter than it is.
func roundUp(d time.Duration) time.Duration {
	const step = 100 * time.Millisecond
	if d <= 0 {
		return step
	}
	return (d + step - 1) / step * step
}

// decide is what becomes of a proof: nil when it is right, a
// refusal when the gate did not check it, or errWrongProof once its held
// refusal may go; errGateClosed when done closes while it is held. A
// right proof returns at once; a wrong one returns no sooner than the gate
// allows.
func (g *proofGate) decide(addr string, done <-chan struct{}, verify func() bool) error {
	v, at := g.check(addr, time.Now(), verify)
	switch v {
	case gateAdmit:
		return nil
	case gateBusy:
		return errTooManyProofs(addr, time.Until(at))
	}
	defer g.release(addr, at)
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-t.C:
		return errWrongProof
	case <-done:
		return errGateClosed
	}
}

// errWrongProof is a proof that does not match: the caller words the
// refusal (one fixed message that does not say what was wrong).
var errWrongProof = errors.New("the token proof does not match")

// pendingConns are the connections that have not yet sent their proof,
// at most max in all and perAddr from one address. When a new one would
// pass a bound, one is dropped: the oldest of its own address when that
// address is at its bound, else the oldest of the address that has the
// most (a flood from one source, which is never fewer than anyone else's
// connections). So a flood from one address drops only its own.
type pendingConns struct {
	max, perAddr int
	conns        []pendingConn // oldest first
}

type pendingConn struct {
	conn net.Conn
	addr string
}

// newPendingConns bounds pending connections at max in all and half of
// that (at least 1) per address.
func newPendingConns(bound int) pendingConns {
	return pendingConns{max: bound, perAddr: max(1, bound/2)}
}

// add counts conn from addr and returns the connection it displaces, or
// nil.
func (p *pendingConns) add(conn net.Conn, addr string) net.Conn {
	var drop net.Conn
	switch {
	case p.count(addr) >= p.perAddr:
		drop = p.removeOldest(addr)
	case len(p.conns) >= p.max:
		drop = p.removeOldest(p.largest())
	}
	p.conns = append(p.conns, pendingConn{conn, addr})
	return drop
}

// remove forgets conn (it sent its proof, or ended).
func (p *pendingConns) remove(conn net.Conn) {
	for i, c := range p.conns {
		if c.conn == conn {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			return
		}
	}
}

func (p *pendingConns) count(addr string) int {
	n := 0
	for _, c := range p.conns {
		if c.addr == addr {
			n++
		}
	}
	return n
}

// largest is the address with the most pending connections; of equals,
// the one whose oldest is oldest.
func (p *pendingConns) largest() string {
	best, bestN := "", 0
	for _, c := range p.conns {
		if n := p.count(c.addr); n > bestN {
			best, bestN = c.addr, n
		}
	}
	return best
}

func (p *pendingConns) removeOldest(addr string) net.Conn {
	for i, c := range p.conns {
		if c.addr == addr {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			return c.conn
		}
	}
	return nil
}

// all is every pending connection, oldest first.
func (p *pendingConns) all() []net.Conn {
	out := make([]net.Conn, len(p.conns))
	for i, c := range p.conns {
		out[i] = c.conn
	}
	return out
}

// logPace bounds the daemon's lines about refused connections, which
// anyone who can connect causes: logBurst at once, then one per
// logInterval. The lines held back are counted, and the next line logged
// says how many.
type logPace struct {
	mu      sync.Mutex
	tat     time.Time // theoretical arrival time (GCRA), as the gate's budget
	skipped int       // lines held back since the last one logged
}

const (
	logBurst    = 20
	logInterval = 100 * time.Millisecond
)

// allow says whether a line may be logged at now and, when it may, how
// many were held back before it.
func (p *logPace) allow(now time.Time) (bool, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tat := p.tat
	if tat.Before(now) {
		tat = now
	}
	if tat.Sub(now) > (logBurst-1)*logInterval {
		p.skipped++
		return false, 0
	}
	p.tat = tat.Add(logInterval)
	skipped := p.skipped
	p.skipped = 0
	return true, skipped
}
