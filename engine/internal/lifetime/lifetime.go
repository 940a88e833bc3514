// Package lifetime is the lifetime every domain has, local (engine's
// Domain) or global (engine/global's Domain): live → released → freeing →
// freed.
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
// depends on whether running the free again can complete it (Outcome):
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
// A Life holds no lock of its own and never blocks. Its owner guards it
// with its lock (engine's w.mu for a local domain, the domain's own for a
// global one) around each method, and runs the backend free and the wait
// for another caller's free between Begin and End with that lock
// released: no lock is held across a backend call.
package lifetime

// State is where a domain is in its lifetime.
type State uint8

const (
	Live     State = iota // usable: indexed, staged, handed to tasks
	Released              // no new use; its windows may still exist
	Freeing               // one caller is running the backend free
	Freed                 // the backend windows are gone
	Failed                // a free failed and nothing can run it again
)

func (s State) String() string {
	return [...]string{"live", "released", "freeing", "freed", "failed"}[s]
}

// Attempt is one run of a domain's backend free. Its caller sets err,
// then closes done; whoever waited on done reads err after it.
type Attempt struct {
	done chan struct{}
	err  error
}

// Wait returns the attempt's result once it has ended.
func (a *Attempt) Wait() error {
	<-a.done
	return a.err
}

// Ended reports whether the attempt has ended, without waiting.
func (a *Attempt) Ended() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// Life is one domain's lifetime. Its zero value is live.
type Life struct {
	state State
	last  *Attempt // the free in progress, or the last one that ended
}

// State is where l is.
func (l *Life) State() State { return l.state }

// Released reports whether the domain may no longer be used.
func (l *Life) Released() bool { return l.state != Live }

// Freed reports whether the backend windows are gone.
func (l *Life) Freed() bool { return l.state == Freed }

// Release moves a live domain to released and reports whether this call
// did (the owner then takes it off its live list and says so once).
func (l *Life) Release() bool {
	if l.state != Live {
		return false
	}
	l.state = Released
	return true
}

// Begin is a caller's turn at freeing. With run true the caller is the
// one that frees: it runs the backend free, then calls End with a. With
// run false it reports a's result (a.Wait, at once for a free that has
// ended). A live domain is released by Begin (a sweep).
func (l *Life) Begin() (a *Attempt, run bool) {
	switch l.state {
	case Live, Released:
		l.state = Freeing
		l.last = &Attempt{done: make(chan struct{})}
		return l.last, true
	}
	return l.last, false // freeing: wait for it; freed or failed: replay
}

// End records the result of attempt a, which this caller ran, and wakes
// the callers waiting for it. retry says whether running the free again
// could complete it (see the package's rule).
func (l *Life) End(a *Attempt, err error, retry bool) {
	if l.state != Freeing || l.last != a {
		panic("lifetime: end of a free that is not running")
	}
	l.state, _ = Outcome(err, retry)
	a.err = err
	close(a.done)
}

// Outcome is the failed-free rule in one place: where a free that
// returned err leaves the domain, and whether the Worker must be poisoned.
// The owner asks it before End, and poisons the Worker before the result
// reaches any waiter.
func Outcome(err error, retry bool) (next State, poison bool) {
	switch {
	case err == nil:
		return Freed, false
	case retry:
		return Released, false
	}
	return Failed, true
}
