package engine

// lifeState is where a domain is in its lifetime.
type lifeState uint8

const (
	lifeLive     lifeState = iota // usable: indexed, staged, handed to tasks
	lifeReleased                  // no new use; its windows may still exist
	lifeFreeing                   // one caller is running the backend free
	lifeFreed                     // the backend windows are gone
	lifeFailed                    // a free failed and nothing can run it again
)

func (s lifeState) String() string {
	return [...]string{"live", "released", "freeing", "freed", "failed"}[s]
}

// freeAttempt is one run of a domain's backend free. Its caller sets err,
// then closes done; whoever waited on done reads err after it.
type freeAttempt struct {
	done chan struct{}
	err  error
}

// lifetime is the lifetime every domain has, local (Domain) or global
// (GlobalDomain): live → released → freeing → freed.
//
// Release moves it to released at once: from then on nothing new may use
// the domain, though its windows are freed only later (after the owning
// run's fence). Exactly one caller runs the backend free; callers that
// come while it runs wait for it and get its result, and callers after a
// free that ended get its result replayed, without a second backend call.
//
// The rule for a failed free, the same for both kinds: the domain stays
// released and not freed, with the error kept — it is never live again,
// since part of it may already be gone — and the caller that ran the free
// reports the error (a run's fence makes it the run's error). Then it
// depends on whether running the free again can complete it (outcome):
//
//   - It can (retry): the next Release, or the Worker's close, runs it
//     again. A global domain's free is this kind: it is a RELEASE command
//     to each node, and a command that failed (a lost connection, a
//     timeout, a node that refused) left the node's domain where it was,
//     while a node that has already released ignores a repeat. The
//     broker's own state is sound meanwhile, so it keeps working.
//   - It cannot: the domain ends failed and the Worker is poisoned,
//     because something the Worker owns is in a state nothing will clean
//     up. A local domain's free is this kind: each rank's release
//     (hal/comm) runs every step of its teardown whatever fails and is a
//     no-op when called again, so a retry could only report a success it
//     did not achieve; and what the failure leaves is in this Worker's own
//     chips — a window a chip may still map while its memory goes back to
//     the pool for the next allocation — so handing out another domain
//     could hand a kernel a half-freed window. So is any free that fails
//     at close, the last caller that would retry it.
//
// lifetime holds no lock of its own and never blocks. Its owner guards it
// with its lock (w.mu for a Domain, d.mu for a GlobalDomain) around each
// method, and runs the backend free and the wait for another caller's free
// between begin and end with that lock released: no lock is held across a
// backend call.
type lifetime struct {
	state lifeState
	last  *freeAttempt // the free in progress, or the last one that ended
}

func (l *lifetime) released() bool { return l.state != lifeLive }
func (l *lifetime) freed() bool    { return l.state == lifeFreed }

// release moves a live domain to released and reports whether this call
// did (the owner then takes it off its live list and says so once).
func (l *lifetime) release() bool {
	if l.state != lifeLive {
		return false
	}
	l.state = lifeReleased
	return true
}

// begin is a caller's turn at freeing. With run true the caller is the
// one that frees: it runs the backend free on a, then calls end. With run
// false it reports a's result: once <-a.done returns (at once for a free
// that has ended), a.err. A live domain is released by begin (a sweep).
func (l *lifetime) begin() (a *freeAttempt, run bool) {
	switch l.state {
	case lifeLive, lifeReleased:
		l.state = lifeFreeing
		l.last = &freeAttempt{done: make(chan struct{})}
		return l.last, true
	}
	return l.last, false // freeing: wait for it; freed or failed: replay
}

// end records the result of attempt a, which this caller ran, and wakes
// the callers waiting for it. retry says whether running the free again
// could complete it (see the type's rule).
func (l *lifetime) end(a *freeAttempt, err error, retry bool) {
	if l.state != lifeFreeing || l.last != a {
		panic("lifetime: end of a free that is not running")
	}
	l.state, _ = outcome(err, retry)
	a.err = err
	close(a.done)
}

// outcome is the failed-free rule in one place: where a free that
// returned err leaves the domain, and whether the Worker must be poisoned.
// The owner asks it before end, and poisons the Worker before the result
// reaches any waiter.
func outcome(err error, retry bool) (next lifeState, poison bool) {
	switch {
	case err == nil:
		return lifeFreed, false
	case retry:
		return lifeReleased, false
	}
	return lifeFailed, true
}
