package engine

import "sync"

// A nil *Stopper is one that nothing will ask: its methods do nothing.
//
// Stopper lets running code be asked to stop: a kernel past its deadline,
// the tasks of a cancelled run. What stopping means is the runner's: the
// binding registers it when a callable starts (a Starlark thread's
// Cancel, so the interpreter stops at its next step), the engine calls
// Stop. A Stopper is reused for the next callable after Reset.
type Stopper struct {
	mu     sync.Mutex
	fn     func(reason string)
	reason string
	done   bool
	// A loop endpoint's Stopper also holds which member runs there (or
	// ran last) and which was cancelled before it started, so that a
	// member's start and a cancel of it take this one lock (begin,
	// stopMember).
	cur, doomed memberKey
}

// OnStop registers how to stop what runs now; if Stop came first, fn is
// called at once.
func (s *Stopper) OnStop(fn func(reason string)) {
	if s == nil {
		return // nothing will ask
	}
	s.mu.Lock()
	s.fn = fn
	done, reason := s.done, s.reason
	s.mu.Unlock()
	if done && fn != nil {
		fn(reason)
	}
}

// Stop asks what runs to stop, with reason; only the first Stop counts.
func (s *Stopper) Stop(reason string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	s.done, s.reason = true, reason
	fn := s.fn
	s.mu.Unlock()
	if fn != nil {
		fn(reason)
	}
}

// Stopped reports whether Stop was called, and why.
func (s *Stopper) Stopped() (bool, string) {
	if s == nil {
		return false, ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done, s.reason
}

// Reset readies the Stopper for the next callable.
func (s *Stopper) Reset() {
	s.mu.Lock()
	s.fn, s.reason, s.done = nil, "", false
	s.mu.Unlock()
}

// begin readies s for member k, which is about to start; it reports
// false if k was cancelled before it started, and must not run.
func (s *Stopper) begin(k memberKey) bool {
	s.mu.Lock()
	run := s.doomed != k
	s.cur, s.doomed = k, memberKey{}
	s.fn, s.reason, s.done = nil, "", false
	s.mu.Unlock()
	return run
}

// stopMember stops member k if it is what runs (a late stop of the member
// that ran last is harmless: begin resets s for the next), and otherwise
// marks k not to be run when it starts. The stop hook is called under s.mu
// so that it cannot reach the member that starts next; hooks do not block
// (they interrupt an interpreter, cancel a run, or send a cancel from a
// goroutine of their own) and do not call back into s.
func (s *Stopper) stopMember(k memberKey, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != k {
		s.doomed = k
		return
	}
	if s.done {
		return
	}
	s.done, s.reason = true, reason
	if s.fn != nil {
		s.fn(reason)
	}
}
