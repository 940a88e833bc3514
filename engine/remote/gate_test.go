package remote

import (
	"fmt"
	"net"
	"regexp"
	"testing"
	"time"
)

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

var wrongToken = []byte("a wrong token of enough bytes")

const wrongProof = "HELLO: the token proof does not match"

var sessionTag = regexp.MustCompile(`^\[session [0-9a-f]{16}\] `)

// sessionEnded is the daemon's own line when a session ends: its log,
// which the test shares with the sessions' output.
var sessionEnded = regexp.MustCompile(`^simpler remote-l3-worker: session [0-9a-f]{16} from 127\.0\.0\.1:\d+ ended: exit status 0$`)
