package engine

// Roles layered on a Worker — global domains, remote buffers — live in
// packages of their own (engine/global, engine/remote) and meet the Worker
// at four points only:
//
//   - per-worker state, made on first use (Worker.Role);
//   - work after a run's fence, outside w.mu, in a fixed order of phases
//     (Run.OnFence), so a run that used none of them carries nothing;
//   - work at close, outside w.mu, in a fixed order of phases
//     (Worker.OnClose);
//   - control commands a node serves for a broker (RegisterControl,
//     Worker.Command).
//
// A role's own locks are leaves (see the package doc): never held while
// calling into the Worker. No hook runs under w.mu.

import (
	"sync"

	"simpler/wire"
)

// FencePhase orders the work after a run's fence. The run's own cleanups
// (Run.AddCleanup) run between FenceRemote and FenceGlobal.
type FencePhase uint8

const (
	FenceRemote FencePhase = iota // remote buffers the run's tasks captured
	FenceGlobal                   // global domains the run brokered
	FenceLocal                    // local domains the run allocated
	nFencePhases
)

// fenceHook is one role's work after one run's fence.
type fenceHook struct {
	key any
	fn  func() error
}

// OnFence registers fn to run once after r's fence, outside the Worker's
// lock, in phase order; key names the role, and a second registration of
// the same key in the same phase is ignored (a role registers the first
// time a run uses it and keeps its own list). fn's error becomes the run's
// error if it has none. It reports false, registering nothing, once r is
// past its fence: the role then does the work itself.
func (r *Run) OnFence(p FencePhase, key any, fn func() error) bool {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	return r.onFence(p, key, fn)
}

// onFence is OnFence with w.mu held.
func (r *Run) onFence(p FencePhase, key any, fn func() error) bool {
	if r.core.Fenced() {
		return false
	}
	for _, h := range r.fence[p] {
		if h.key == key {
			return true
		}
	}
	r.fence[p] = append(r.fence[p], fenceHook{key, fn})
	return true
}

// hasFenceWork reports whether r registered any fence hook. Caller holds
// w.mu.
func (r *Run) hasFenceWork() bool {
	for p := range r.fence {
		if len(r.fence[p]) > 0 {
			return true
		}
	}
	return false
}

// runFence runs r's hooks of phase p, keeping the first error as the
// run's. Caller holds no lock; the fence owns r's hooks by now.
func (r *Run) runFence(p FencePhase) {
	for _, h := range r.fence[p] {
		if err := h.fn(); err != nil && r.waitErr == nil {
			r.waitErr = err
		}
	}
	r.fence[p] = nil
}

// ClosePhase orders the work a role registers for close.
type ClosePhase uint8

const (
	// CloseAfterDrain runs once every run has finished (or was forced),
	// before the endpoints stop: global domains are freed here.
	CloseAfterDrain ClosePhase = iota
	// CloseBeforeTeardown runs after the endpoints stopped, before the
	// chips, processes and sessions close.
	CloseBeforeTeardown
	nClosePhases
)

// closeHook is one role's work at close.
type closeHook struct {
	key any
	fn  func() error
}

// OnClose registers fn to run once when w closes, outside the Worker's
// lock, in phase order; a second registration of key in the same phase is
// ignored. Its error is close's if close has none.
func (w *Worker) OnClose(p ClosePhase, key any, fn func() error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range w.closeHooks[p] {
		if h.key == key {
			return
		}
	}
	w.closeHooks[p] = append(w.closeHooks[p], closeHook{key, fn})
}

// runClose runs the close hooks of phase p, and returns the first error.
func (w *Worker) runClose(p ClosePhase) error {
	w.mu.Lock()
	hooks := w.closeHooks[p]
	w.closeHooks[p] = nil
	w.mu.Unlock()
	var first error
	for _, h := range hooks {
		if err := h.fn(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Role returns w's state for the role named by key, made by make the first
// time it is asked for. make runs under a lock of its own (not w.mu): it
// must not call back into the Worker's locking methods.
func (w *Worker) Role(key any, make func() any) any {
	w.roleMu.Lock()
	defer w.roleMu.Unlock()
	if v, ok := w.roles[key]; ok {
		return v
	}
	if w.roles == nil {
		w.roles = map[any]any{}
	}
	v := make()
	w.roles[key] = v
	return v
}

// ControlHandler serves a control command on a node (a level-3 worker): a
// broker's global-domain transaction steps, say. It fills r and returns
// the command's error.
type ControlHandler func(w *Worker, c wire.Control, r *wire.ControlReply) error

var controls struct {
	mu sync.RWMutex
	by map[wire.Command]ControlHandler
}

// RegisterControl makes h serve the commands cmds on every Worker. A
// role's package calls it from its init, so a binary that links the role
// serves its commands; registering a command twice panics.
func RegisterControl(h ControlHandler, cmds ...wire.Command) {
	controls.mu.Lock()
	defer controls.mu.Unlock()
	if controls.by == nil {
		controls.by = map[wire.Command]ControlHandler{}
	}
	for _, c := range cmds {
		if controls.by[c] != nil {
			panic("engine: control command registered twice")
		}
		controls.by[c] = h
	}
}

// Command serves control command c on this node through the handler
// registered for it; a command no linked role serves is a RuntimeError.
func (w *Worker) Command(c wire.Control, r *wire.ControlReply) error {
	controls.mu.RLock()
	h := controls.by[c.Cmd]
	controls.mu.RUnlock()
	if h == nil {
		return Errorf(RuntimeError, "control command %v: this node serves no such command", c.Cmd)
	}
	return h(w, c, r)
}
