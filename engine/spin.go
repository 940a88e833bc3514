package engine

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Spin-then-block hand-offs. A goroutine that blocks on a channel parks,
// and when nothing else runs its OS thread sleeps; the next send must wake
// that thread, which costs 50–100 µs on a loaded two-core VM — as much as
// a small collective's whole work. So the two waits on the path of a short
// run — an endpoint waiting for its next member, and the caller waiting
// for the run to be done — first poll their channel for a bounded time,
// yielding (runtime.Gosched) between polls so that whatever they wait for
// can run, and only then block. The bounds keep an idle Worker from
// burning a core, and a wide one (a thousand endpoints of a pod) from
// filling the run queue with pollers: a wait polls for at most spinFor,
// once; at most one core fewer than Go runs on of the endpoints poll at
// a time, and one run wait besides (the others block at once).
//
// Measured with 4 KiB allreduces back to back on 4 chips (thread mode,
// two loaded cores): 100 µs took 10–15% off a call; 400 µs no more.
//
// The run wait has a place of its own because the goroutine waiting for a
// run is the one that submits the next run's members. When it took the
// endpoints' only place (two cores), the endpoints were parked when the
// next run began, and each submit woke a thread for its member (a futex
// call, about 3 µs of the submitter's time here, then the wake-up): a
// 4 KiB allreduce over windows took 26 µs at 2 ranks and 48 µs at 4, and
// 21 and 37 µs with the run wait's place apart (medians of 6 runs of
// 10,000 calls each). Only the Worker a script drives, with every member
// in this process, has that place (tree.waitPlaces). One with remote
// nodes, a child, and a Worker serving a parent in another process keep
// the run wait in the endpoints' places, as before: their runs may wait
// on other processes, which need the cores, and nothing measured there
// asked for more polling.

// spinFor bounds the polling of one wait.
const spinFor = 100 * time.Microsecond

// pollers bounds how many waits of one kind poll at once.
type pollers struct {
	n   atomic.Int32
	max int32
}

// take takes a polling place if one is free; give it back with give.
func (p *pollers) take() bool {
	if p.n.Add(1) > p.max {
		p.n.Add(-1)
		return false
	}
	return true
}

func (p *pollers) give() { p.n.Add(-1) }

// endpointPollers: one core fewer than Go runs on, so that whatever the
// pollers wait for has a core of its own, but at least one. (GOMAXPROCS is
// read once: it takes the scheduler's lock, which on the dispatch path
// cost more than the poll it bounds.) runPollers: one run wait.
var (
	endpointPollers = pollers{max: int32(max(1, runtime.GOMAXPROCS(0)-1))}
	runPollers      = pollers{max: 1}
)

// spinRecv receives from ch (an endpoint's): polled for at most spinFor,
// then blocking.
func spinRecv[T any](ch <-chan T) (T, bool) {
	select { // often there already: no slot, no clock
	case v, ok := <-ch:
		return v, ok
	default:
	}
	if !endpointPollers.take() {
		v, ok := <-ch
		return v, ok
	}
	defer endpointPollers.give()
	deadline := time.Now().Add(spinFor)
	for {
		select {
		case v, ok := <-ch:
			return v, ok
		default:
		}
		if time.Now().After(deadline) {
			v, ok := <-ch
			return v, ok
		}
		runtime.Gosched()
	}
}

// spinDone reports whether done (a run's) is closed within spinFor,
// polling it in one of places's places.
func spinDone(done <-chan struct{}, places *pollers) bool {
	select { // often closed already: no slot, no clock
	case <-done:
		return true
	default:
	}
	if !places.take() {
		return false
	}
	defer places.give()
	deadline := time.Now().Add(spinFor)
	for {
		select {
		case <-done:
			return true
		default:
		}
		if time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
	}
}
