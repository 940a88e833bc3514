package netspin

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"simpler/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// pair returns both ends of a loopback TCP connection.
func pair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestReadsWhatArrivesWhileSpinningAndAfterBlocking(t *testing.T) {
	spinOne(t)
	client, server := pair(t)
	r := NewReader(server, time.Millisecond)
	if r.raw == nil {
		t.Fatal("a TCP connection should be polled")
	}
	go client.Write([]byte("now"))
	got := make([]byte, 3)
	if _, err := io.ReadFull(r, got); err != nil || string(got) != "now" {
		t.Fatalf("read %q, %v", got, err)
	}
	// Data that comes long after the spin is read by the blocking read.
	go func() { time.Sleep(20 * time.Millisecond); client.Write([]byte("later")) }()
	got = make([]byte, 5)
	if _, err := io.ReadFull(r, got); err != nil || string(got) != "later" {
		t.Fatalf("read %q, %v", got, err)
	}
	// Large data arrives in pieces; io.ReadFull gathers them.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	go client.Write(big)
	got = make([]byte, len(big))
	if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("1 MiB read: %v", err)
	}
}

func TestEOFAndCloseEndTheRead(t *testing.T) {
	spinOne(t)
	client, server := pair(t)
	r := NewReader(server, time.Millisecond)
	client.Close()
	if _, err := r.Read(make([]byte, 8)); !errors.Is(err, io.EOF) {
		t.Fatalf("after the peer closed: %v, want EOF", err)
	}
	client2, server2 := pair(t)
	_ = client2
	r = NewReader(server2, time.Millisecond)
	go func() { time.Sleep(10 * time.Millisecond); server2.Close() }()
	if _, err := r.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("after closing our end: %v, want net.ErrClosed", err)
	}
}

func TestDeadlineAppliesToTheBlockingRead(t *testing.T) {
	spinOne(t)
	_, server := pair(t)
	r := NewReader(server, 100*time.Microsecond)
	server.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
	var ne net.Error
	if _, err := r.Read(make([]byte, 8)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
}

func TestPlainConnectionsAreReadPlainly(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	r := NewReader(b, time.Millisecond)
	if r.raw != nil {
		t.Fatal("a pipe cannot be polled")
	}
	go a.Write([]byte("x"))
	got := make([]byte, 1)
	if _, err := r.Read(got); err != nil || got[0] != 'x' {
		t.Fatalf("read %q, %v", got, err)
	}
}

// steady makes r see no involuntary context switch, however loaded the
// machine running the test is: its spins end by data or by time only.
func steady(r *Reader) *Reader {
	r.switches = func() int64 { return 0 }
	return r
}

// spinOne lets one reader spin for the test, whatever the machine.
func spinOne(t *testing.T) {
	old := maxSpinners
	maxSpinners = 1
	t.Cleanup(func() { maxSpinners = old })
}

func TestSpinAdapts(t *testing.T) {
	spinOne(t)
	client, server := pair(t)
	r := steady(NewReader(server, 8*time.Millisecond))
	got := make([]byte, 1)
	// Quiet: each answer takes longer than the longest spin, so the next
	// spin is half as long, down to a quarter.
	ms := time.Millisecond
	for i, want := range []time.Duration{4 * ms, 2 * ms, 2 * ms, 2 * ms} {
		go func() { time.Sleep(100 * time.Millisecond); client.Write([]byte("q")) }()
		if _, err := r.Read(got); err != nil {
			t.Fatal(err)
		}
		if r.pol.spin != want {
			t.Fatalf("after quiet read %d: spin %v, want %v", i, r.pol.spin, want)
		}
	}
	// Late, but within reach: an answer that took 1 ms or more makes the
	// next spin four times that, up to the maximum.
	go func() { time.Sleep(ms); client.Write([]byte("l")) }()
	if _, err := r.Read(got); err != nil {
		t.Fatal(err)
	}
	if r.pol.spin < 4*ms || r.pol.spin > 8*ms {
		t.Fatalf("after an answer 1 ms late: spin %v, want 4-8ms", r.pol.spin)
	}
	// Busy: data that is there at once makes the next spin short again.
	client.Write([]byte("b"))
	time.Sleep(20 * time.Millisecond) // it has arrived
	if _, err := r.Read(got); err != nil {
		t.Fatal(err)
	}
	if r.pol.spin >= 4*ms {
		t.Fatalf("after an answer that was there at once: spin %v, want it short", r.pol.spin)
	}
}

func TestAtMostHalfTheProcessorsSpin(t *testing.T) {
	spinOne(t)
	c1, s1 := pair(t)
	c2, s2 := pair(t)
	a := steady(NewReader(s1, time.Hour)) // spins until its data comes
	b := steady(NewReader(s2, 8*time.Millisecond))
	done := make(chan error, 1)
	go func() {
		_, err := a.Read(make([]byte, 1))
		done <- err
	}()
	for spinning.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	go func() { time.Sleep(50 * time.Millisecond); c2.Write([]byte("b")) }()
	if _, err := b.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if b.pol.spin != 8*time.Millisecond {
		t.Errorf("the second reader spun (its spin is now %v) while the only spinner was busy", b.pol.spin)
	}
	c1.Write([]byte("a"))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := spinning.Load(); n != 0 {
		t.Errorf("%d spinners left", n)
	}
}

// TestBlockedReaderGivesItsPlaceUp: a reader whose spin ran out and that
// now blocks no longer counts as spinning, so another can spin.
func TestBlockedReaderGivesItsPlaceUp(t *testing.T) {
	spinOne(t)
	c1, s1 := pair(t)
	a := steady(NewReader(s1, 200*time.Millisecond))
	done := make(chan error, 1)
	go func() {
		_, err := a.Read(make([]byte, 1))
		done <- err
	}()
	// a spins (long enough to be seen), then blocks and gives the place up.
	for _, want := range []int32{1, 0} {
		for deadline := time.Now().Add(5 * time.Second); spinning.Load() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("the reader's spinners stayed at %d, want %d", spinning.Load(), want)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	c1.Write([]byte("a"))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestPolicySteps drives the policy by outcomes: an answer within the
// maximum sets the next spin to four times its wait (between a quarter
// of the maximum and the maximum), a longer one halves it, and a
// preempted spin halves it and cuts every spin to holdSpin for the hold,
// which doubles while preemption repeats (up to holdMax) and comes back to
// holdMin once a spin sees data.
func TestPolicySteps(t *testing.T) {
	ms, us := time.Millisecond, time.Microsecond
	p := newPolicy(8 * ms)
	now := time.Unix(1000, 0)
	step := func(o outcome, waited, wantSpin, wantBudget time.Duration) {
		t.Helper()
		p.ended(o, waited, now)
		if p.spin != wantSpin {
			t.Fatalf("after outcome %d waiting %v: spin %v, want %v", o, waited, p.spin, wantSpin)
		}
		if got := p.budget(now); got != wantBudget {
			t.Fatalf("after outcome %d: budget %v, want %v", o, got, wantBudget)
		}
	}
	if got := p.budget(now); got != 8*ms {
		t.Fatalf("a fresh policy spins %v, want 8ms", got)
	}
	step(timedOut, 100*ms, 4*ms, 4*ms) // quiet: half
	step(gotData, ms, 4*ms, 4*ms)      // four times the wait
	step(gotData, 10*us, 2*ms, 2*ms)   // at least a quarter
	step(timedOut, 3*ms, 8*ms, 8*ms)   // late but within reach: at most the maximum
	step(preempted, 0, 4*ms, holdSpin) // held off for 1 ms: short spins only
	now = now.Add(ms - 1)
	if got := p.budget(now); got != holdSpin {
		t.Fatalf("within the hold: budget %v, want %v", got, holdSpin)
	}
	now = now.Add(1)
	if got := p.budget(now); got != 4*ms {
		t.Fatalf("after the hold: budget %v, want 4ms", got)
	}
	// Preempted again and again: each hold twice the last, up to holdMax.
	want := 2 * ms
	for i := 0; i < 12; i++ {
		step(preempted, 0, max(p.spin/2, 2*ms), holdSpin)
		if p.quietUntil.Sub(now) != want {
			t.Fatalf("preemption %d: held %v, want %v", i+2, p.quietUntil.Sub(now), want)
		}
		want = min(2*want, holdMax)
		now = p.quietUntil
	}
	step(gotData, 3*ms/4, 3*ms, 3*ms)
	if p.hold != holdMin {
		t.Fatalf("after data the next hold is %v, want %v", p.hold, holdMin)
	}
}

// TestSpinsOnlyWhileAnAnswerIsDue: a reader told what is due blocks at
// once while nothing is (taking no spinner's place) and still reads what
// comes unasked; Due ends that block, so the reader spins for the answer;
// and a Due that lands after the read it meant has ended costs the next
// read nothing.
func TestSpinsOnlyWhileAnAnswerIsDue(t *testing.T) {
	spinOne(t)
	client, server := pair(t)
	r := steady(NewReader(server, time.Hour))
	var due atomic.Bool
	r.SpinWhileDue(due.Load)
	read := func() chan string {
		got := make(chan string, 1)
		go func() {
			b := make([]byte, 1)
			if _, err := r.Read(b); err != nil {
				got <- err.Error()
				return
			}
			got <- string(b)
		}()
		return got
	}
	expect := func(got chan string, want string) {
		t.Helper()
		if s := <-got; s != want {
			t.Fatalf("read %q, want %q", s, want)
		}
	}
	got := read()
	eventually(t, "the reader to block with nothing due", r.parked.Load)
	if n := spinning.Load(); n != 0 {
		t.Fatalf("%d spinners with nothing due", n)
	}
	client.Write([]byte("a"))
	expect(got, "a")

	got = read()
	eventually(t, "the reader to block with nothing due", r.parked.Load)
	due.Store(true)
	r.Due()
	eventually(t, "the reader to spin for what is due", func() bool { return spinning.Load() == 1 })
	client.Write([]byte("b"))
	expect(got, "b")

	server.SetReadDeadline(aLongTimeAgo) // a late Due's
	got = read()
	client.Write([]byte("c"))
	expect(got, "c")
	due.Store(false)
	got = read()
	eventually(t, "the reader to block with nothing due", r.parked.Load)
	client.Write([]byte("d"))
	expect(got, "d")
}

// TestSharedCoreEndsTheSpin: a reader that sees the process switched out
// while it spins stops spinning and blocks (giving its spinner's place
// up), though its spin would last an hour; what arrives later is read by
// the blocking read, and the policy holds long spins off.
func TestSharedCoreEndsTheSpin(t *testing.T) {
	spinOne(t)
	client, server := pair(t)
	r := NewReader(server, time.Hour)
	var n atomic.Int64
	r.switches = func() int64 { return n.Add(1) } // switched out between every two looks
	done := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 1))
		done <- err
	}()
	eventually(t, "the reader to block", func() bool { return n.Load() >= 2 && spinning.Load() == 0 })
	client.Write([]byte("a"))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if r.pol.hold != 2*holdMin || r.pol.quietUntil.IsZero() {
		t.Errorf("the spin did not end as preempted: hold %v, quiet until %v", r.pol.hold, r.pol.quietUntil)
	}
}

// eventually waits up to 5 s for cond, checking often.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestMovingThreadIsNotPreemption: a spinning goroutine that lands on
// another thread between two looks compares nothing across the move (the
// counts are per thread), so its spin runs out by time, not as preempted.
func TestMovingThreadIsNotPreemption(t *testing.T) {
	spinOne(t)
	_, server := pair(t)
	r := NewReader(server, 5*time.Millisecond)
	var tid atomic.Int64
	r.switches = func() int64 { return tid.Add(1)<<40 | 7 } // a new thread at every look
	server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := r.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data nobody sent")
	}
	if tid.Load() < 2 {
		t.Fatalf("the spin looked %d times, want at least 2", tid.Load())
	}
	if !r.pol.quietUntil.IsZero() || r.pol.spin != 5*time.Millisecond/2 {
		t.Errorf("the spin did not end by time: spin %v, quiet until %v", r.pol.spin, r.pol.quietUntil)
	}
}
