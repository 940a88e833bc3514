package remote

import (
	"errors"
	"sync"
	"time"

	"simpler/kind"
)

// proofGate slows down token guessing: once an address has sent a wrong
// proof, its next proofs are checked one at a time, each no sooner than a
// delay that doubles with every failure (gateBase, up to gateMax). A right
// proof clears the address. It is a plain state machine over the times it
// is given, so tests step it directly.
type proofGate struct {
	mu    sync.Mutex
	addrs map[string]*gateState
}

type gateState struct {
	failures int
	next     time.Time // the earliest time the next proof is checked
	last     time.Time // the last failure
}

const (
	gateBase   = 100 * time.Millisecond
	gateMax    = 10 * time.Second
	gateForget = 10 * time.Minute // failures older than this are forgotten
	gateAddrs  = 4096             // addresses remembered at most
)

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

// reserve returns when a proof from addr that arrived at now may be
// checked, and holds that time for it: a second proof from addr waits a
// further delay behind the first.
func (g *proofGate) reserve(addr string, now time.Time) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.addrs[addr]
	if st == nil || now.Sub(st.last) > gateForget {
		return now
	}
	at := st.next
	if now.After(at) {
		at = now
	}
	st.next = at.Add(gateDelay(st.failures))
	return at
}

// failed records a wrong proof from addr at now.
func (g *proofGate) failed(addr string, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.addrs == nil {
		g.addrs = map[string]*gateState{}
	}
	st := g.addrs[addr]
	if st == nil || now.Sub(st.last) > gateForget {
		if len(g.addrs) >= gateAddrs {
			g.forget(now)
		}
		st = &gateState{}
		g.addrs[addr] = st
	}
	st.failures++
	st.last = now
	if next := now.Add(gateDelay(st.failures)); next.After(st.next) {
		st.next = next
	}
}

// passed clears addr after a right proof.
func (g *proofGate) passed(addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.addrs, addr)
}

// forget drops stale addresses, or all of them when none is stale (an
// attacker with many addresses then costs bounded memory). Caller holds
// g.mu.
func (g *proofGate) forget(now time.Time) {
	for a, st := range g.addrs {
		if now.Sub(st.last) > gateForget {
			delete(g.addrs, a)
		}
	}
	if len(g.addrs) >= gateAddrs {
		clear(g.addrs)
	}
}

// errGateClosed is a check given up because its server is closing.
var errGateClosed = errors.New("closing")

// check runs verify for a proof from addr no sooner than the gate allows,
// and records its outcome. Unchecked, it returns a RuntimeError when the
// wait would end past deadline (too many failures from addr), and
// errGateClosed when done closes first.
func (g *proofGate) check(addr string, deadline time.Time, done <-chan struct{}, verify func() bool) (bool, error) {
	at := g.reserve(addr, time.Now())
	if at.After(deadline) {
		return false, kind.Errorf(kind.RuntimeError, "too many failed token proofs from %s; try again in %v", addr, time.Until(at).Round(time.Second))
	}
	select {
	case <-time.After(time.Until(at)):
	case <-done:
		return false, errGateClosed
	}
	if !verify() {
		g.failed(addr, time.Now())
		return false, nil
	}
	g.passed(addr)
	return true, nil
}
