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
