package remote

// The lifetime of remote buffers, as a plain state machine: no lock, no
// I/O. Its steps return the physical actions (owner frees, import
// releases) that their caller carries out. A handle's identity and the
// two parts of its lifetime the engine's submit path touches (how many
// tasks hold it, whether the user released it) are on the handle itself
// (engine.RemoteBuffer); the rest is here.

import "simpler/engine"

// action is physical work the registry decided on: one of its fields is
// set.
type action struct {
	free          *engine.RemoteBuffer // free this owner allocation on its owner
	releaseImport *engine.RemoteBuffer // drop this imported mapping on its importer
}

// life is what the registry keeps of a live handle.
type life struct {
	done    bool // the physical free or import release was issued
	imports int  // owner: live imported views
}

// registry is the lifetime of one Worker's remote buffers: every handle
// from its malloc or import until its physical action has been carried
// out (a handle that is not in it is gone, or was never this Worker's).
type registry struct {
	live map[*engine.RemoteBuffer]*life
	// held is how many tasks hold h; the engine counts them
	// ((*engine.RemoteBuffer).Holds), and a test steps its own count.
	held func(h *engine.RemoteBuffer) int
}

func newRegistry() registry {
	return registry{live: map[*engine.RemoteBuffer]*life{}, held: (*engine.RemoteBuffer).Holds}
}

// add records a new handle: an owner allocation, or a view imported from
// h.Source.
func (g *registry) add(h *engine.RemoteBuffer) {
	g.live[h] = &life{}
	if h.Source != nil {
		if o := g.live[h.Source]; o != nil {
			o.imports++
		}
	}
}

// release marks h released and returns what may happen now. Releasing
// again is a no-op.
func (g *registry) release(h *engine.RemoteBuffer) []action {
	if h.Released() {
		return nil
	}
	h.SetReleased(true)
	return g.settle(h, nil)
}

// failed undoes an owner free that could not be carried out (the node
// refused it, the connection failed, a fault point fired): the memory is
// still there, so the handle is live again, unreleased, and a later
// remote_free issues the free anew instead of being a no-op on a handle
// that only looks freed. It returns whether it undid anything. An import
// release is not undone: its owner's free may already have followed it.
func (g *registry) failed(a action) bool {
	h := a.free
	if h == nil || h.Imported() {
		return false
	}
	l := g.live[h]
	if l == nil || !l.done {
		return false
	}
	l.done = false
	h.SetReleased(false)
	return true
}

// settle issues h's physical action once nothing holds it: an imported
// view when its holds drain (which may in turn let its owner go); an
// owner when its holds and imports drain.
func (g *registry) settle(h *engine.RemoteBuffer, acts []action) []action {
	l := g.live[h]
	if l == nil || !h.Released() || l.done || g.held(h) > 0 {
		return acts
	}
	if h.Source != nil {
		l.done = true
		acts = append(acts, action{releaseImport: h})
		if o := g.live[h.Source]; o != nil {
			o.imports--
		}
		return g.settle(h.Source, acts)
	}
	if l.imports > 0 {
		return acts
	}
	l.done = true
	return append(acts, action{free: h})
}

// forget drops the handle of an action that was carried out.
func (g *registry) forget(a action) {
	delete(g.live, a.free)
	delete(g.live, a.releaseImport)
}

// freed reports whether h's physical action was issued and not undone: the
// free of an owner allocation, the release of an imported view.
func (g *registry) freed(h *engine.RemoteBuffer) bool {
	l := g.live[h]
	return h.Released() && (l == nil || l.done)
}
