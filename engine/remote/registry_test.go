package remote

import (
	"testing"

	"simpler/engine"
)

// stepped is a registry whose holds a test counts itself, as the engine
// counts them for tasks.
type stepped struct {
	registry
	holds map[*engine.RemoteBuffer]int
}

func newStepped() *stepped {
	s := &stepped{registry: newRegistry(), holds: map[*engine.RemoteBuffer]int{}}
	s.held = func(h *engine.RemoteBuffer) int { return s.holds[h] }
	return s
}

// owner adds an owner handle; view adds a view of o imported on worker 1.
func (s *stepped) owner() *engine.RemoteBuffer {
	h := &engine.RemoteBuffer{Worker: 0, Owner: 0, BufferID: 7, Gen: 1, NBytes: 16, Access: engine.AccessRW}
	s.add(h)
	return h
}

func (s *stepped) view(o *engine.RemoteBuffer) *engine.RemoteBuffer {
	h := &engine.RemoteBuffer{Worker: 1, Owner: 0, ImportID: 3, NBytes: 16, Access: engine.AccessRW, Source: o}
	s.add(h)
	return h
}

// drop ends one hold on h, as a run's fence does.
func (s *stepped) drop(h *engine.RemoteBuffer) []action {
	s.holds[h]--
	return s.settle(h, nil)
}

// freeOf is the owner free among acts, or nil.
func freeOf(acts []action) *engine.RemoteBuffer {
	for _, a := range acts {
		if a.free != nil {
			return a.free
		}
	}
	return nil
}

// The registry stepped by hand: a free that fails leaves the owner handle
// live, and freeing it again issues the free anew; a free that succeeded
// stays done and a second release is a no-op.
func TestRemoteFreeFailureLeavesTheHandleLive(t *testing.T) {
	s := newStepped()
	h := s.owner()
	acts := s.release(h)
	if freeOf(acts) != h || !h.Released() || !s.freed(h) {
		t.Fatalf("release of an idle owner: acts %v, released %v, freed %v", acts, h.Released(), s.freed(h))
	}
	if !s.failed(acts[0]) {
		t.Fatal("failed did not undo an issued free")
	}
	if h.Released() || s.freed(h) {
		t.Fatalf("after a failed free: released %v, freed %v; want a live handle", h.Released(), s.freed(h))
	}
	if s.failed(acts[0]) {
		t.Error("failed undid a free that was not issued")
	}
	acts = s.release(h) // the retry
	if freeOf(acts) != h || !h.Released() || !s.freed(h) {
		t.Fatalf("retrying the free: acts %v, released %v, freed %v", acts, h.Released(), s.freed(h))
	}
	s.forget(acts[0])
	if again := s.release(h); len(again) != 0 || !s.freed(h) {
		t.Errorf("a release after a free that went ahead: %v, want none (freed %v)", again, s.freed(h))
	}
}

// A failed free that had waited for a task's hold (issued at the fence) is
// undone the same way; an import release is never undone, since its
// owner's free may have followed it.
func TestRemoteFreeFailureAfterDeferral(t *testing.T) {
	s := newStepped()
	h := s.owner()
	s.holds[h]++
	if acts := s.release(h); len(acts) != 0 || !h.Released() || s.freed(h) {
		t.Fatalf("release while a task holds it: acts %v, freed %v", acts, s.freed(h))
	}
	acts := s.drop(h)
	if freeOf(acts) != h || !s.failed(acts[0]) || h.Released() {
		t.Fatalf("the fence's free, failed: acts %v, released %v", acts, h.Released())
	}
	if acts := s.release(h); freeOf(acts) != h {
		t.Errorf("retry after the fence: %v", acts)
	}

	owner := s.owner()
	view := s.view(owner)
	acts = s.release(view)
	if len(acts) != 1 || acts[0].releaseImport != view {
		t.Fatalf("releasing an import: %v", acts)
	}
	if s.failed(acts[0]) || s.failed(action{free: view}) || !view.Released() {
		t.Errorf("an import release was undone (released %v)", view.Released())
	}
}

// An owner's free waits for every hold and every import; an import's
// release waits for its own holds, and letting the last import go lets a
// released owner go with it, in that order.
func TestRemoteRegistryDefersFrees(t *testing.T) {
	s := newStepped()
	owner := s.owner()
	view := s.view(owner)
	s.holds[owner]++
	s.holds[view]++
	if acts := s.release(owner); len(acts) != 0 {
		t.Fatalf("owner released with a hold and an import: %v", acts)
	}
	if acts := s.drop(owner); len(acts) != 0 {
		t.Fatalf("owner's hold dropped, import still live: %v", acts)
	}
	if acts := s.release(view); len(acts) != 0 {
		t.Fatalf("import released with a hold: %v", acts)
	}
	acts := s.drop(view)
	if len(acts) != 2 || acts[0].releaseImport != view || acts[1].free != owner {
		t.Fatalf("the import's last hold: %v, want its release then the owner's free", acts)
	}
	if !s.freed(owner) || !s.freed(view) {
		t.Errorf("freed: owner %v, view %v", s.freed(owner), s.freed(view))
	}
	if acts := s.release(owner); len(acts) != 0 {
		t.Errorf("a second release after the free: %v", acts)
	}
}

// checkRange passes exactly the ranges that fit.
func TestCheckRangeFits(t *testing.T) {
	for off := -2; off < 6; off++ {
		for n := -2; n < 6; n++ {
			fits := off >= 0 && n > 0 && off+n <= 4
			if err := checkRange("op", off, n, 4); (err == nil) != fits {
				t.Errorf("checkRange(%d, %d, 4) = %v, want fits %v", off, n, err, fits)
			}
		}
	}
}
