// Package halt is a running task's stop signal as the code the task runs
// sees it: the one hook by which a deadline, a cancel or a close reaches a
// kernel that is inside a builtin rather than between interpreter steps.
//
// The contract:
//
//   - The runner (the binding that runs a kernel) owns a Signal per
//     endpoint, Resets it before each task, binds it to the kernel's
//     Starlark thread (Bind) and asks it to stop (Stop) when the engine
//     stops the task.
//   - Every builtin that blocks (comm.wait, comm.barrier) selects on Done
//     beside its own timeout and wake-ups, and returns Err once it fires.
//   - Every builtin that runs long (matmul, in-place reductions) polls
//     Stopped between chunks of its work, chunks sized so the check costs
//     nothing measurable, and returns Err once it is true.
//   - Code with no Signal (a nil *Signal: the main thread, a test) is
//     never stopped by it; every method of a nil Signal is safe.
//
// A scheduler that steps kernels itself (a deterministic one) uses the
// same hook: what blocks waits on Done, and Stop ends it.
package halt

import (
	"sync"
	"sync/atomic"

	"simpler/kind"
)

// Signal is one task's stop signal, reused across the tasks of one
// endpoint (Reset).
type Signal struct {
	stopped atomic.Bool // read lock-free by the polls of long builtins
	mu      sync.Mutex
	ch      chan struct{} // closed once stopped; made only when Done is asked
	reason  string
}

// Stop asks what runs to stop, with reason (an error's text, "TimeoutError:
// past its deadline of 1s", say); only the first Stop counts.
func (s *Signal) Stop(reason string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped.Load() {
		return
	}
	s.reason = reason
	s.stopped.Store(true)
	if s.ch != nil {
		close(s.ch)
	}
}

// Stopped reports whether Stop was called: one atomic load, for the
// polls of long builtins.
func (s *Signal) Stopped() bool { return s != nil && s.stopped.Load() }

// Done is a channel closed once Stop has been called. A nil Signal's is
// nil, which a select never receives from. The channel is made on the
// first call after a Reset, so that tasks that never block cost nothing.
func (s *Signal) Done() <-chan struct{} {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
		if s.stopped.Load() {
			close(s.ch)
		}
	}
	return s.ch
}

// Err is nil until Stop is called, then the error op returns for it: of
// the kind the reason carries (a TimeoutError for a deadline), else a
// RuntimeError.
func (s *Signal) Err(op string) error {
	if !s.Stopped() {
		return nil
	}
	s.mu.Lock()
	reason := s.reason
	s.mu.Unlock()
	k, msg, ok := kind.Split(reason)
	if !ok {
		k = kind.RuntimeError
	}
	return kind.Errorf(k, "%s: stopped: %s", op, msg)
}

// Reset readies s for the next task. A Signal that was not stopped keeps
// its channel, so that an endpoint's tasks do not allocate one each.
func (s *Signal) Reset() {
	if !s.Stopped() {
		return
	}
	s.mu.Lock()
	s.stopped.Store(false)
	s.reason, s.ch = "", nil
	s.mu.Unlock()
}

// threadKey is the Starlark thread-local under which a kernel's Signal
// is found.
const threadKey = "simpler.halt"

// Locals is the part of a *starlark.Thread the binding uses; taking it as
// an interface keeps this package, and hal/comm that imports it, free of
// the interpreter.
type Locals interface {
	Local(key string) any
	SetLocal(key string, value any)
}

// Bind makes s the stop signal of the builtins th calls.
func Bind(th Locals, s *Signal) { th.SetLocal(threadKey, s) }

// Of is the stop signal bound to th, nil if none is (a nil th too).
func Of(th Locals) *Signal {
	if th == nil {
		return nil
	}
	s, _ := th.Local(threadKey).(*Signal)
	return s
}
