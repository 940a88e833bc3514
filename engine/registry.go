package engine

import (
	"sort"

	"simpler/wire"
)

// Handle is a callable registered on a Worker. Tasks name callables by
// handle; the digest is what crosses process and host boundaries.
type Handle struct {
	Callable Callable
	Workers  []int // NEXT_LEVEL ids it may run on; nil means any
	refs     int
	owner    *Worker // the worker it was registered on
}

// Digest is the callable's content digest ("sha256:...").
func (h *Handle) Digest() string { return h.Callable.Digest() }

// Name is the callable's function name.
func (h *Handle) Name() string { return h.Callable.Name() }

// Registry is a Worker's callables, by digest. Its map is guarded by the
// Worker's mu, under which a submit finds its handle; Register and
// Unregister hold the Worker's regMu besides, which orders them against
// Init and Close and is what they hold, without mu, while a registration
// fans out to children, child processes and remote nodes.
type Registry struct {
	w        *Worker
	byDigest map[string]*Handle
}

// Registry is the worker's registry.
func (w *Worker) Registry() *Registry { return &w.reg }

// Register makes c callable by tasks of this Worker and of every
// descendant. workers restricts the NEXT_LEVEL ids it may run on. A second
// registration of the same callable adds a reference and returns the same
// handle (its worker restriction must agree).
//
// The checks are made under w.mu; the fan-out to children, child processes
// and remote nodes, which waits for their answers, under regMu alone; the
// handle is entered under w.mu again.
func (reg *Registry) Register(c Callable, workers []int) (*Handle, error) {
	w := reg.w
	w.regMu.Lock()
	defer w.regMu.Unlock()
	w.mu.Lock()
	h, err := reg.check(c, workers)
	w.mu.Unlock()
	if h != nil || err != nil {
		return h, err
	}
	for _, child := range w.tree.children {
		if child == nil {
			continue
		}
		if _, err := child.reg.Register(c, nil); err != nil {
			return nil, Wrap(err, "register on child")
		}
	}
	for _, p := range w.tree.procs() {
		if err := p.Register(c); err != nil {
			return nil, err
		}
	}
	if err := reg.registerRemote(c); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable("register"); err != nil {
		return nil, err
	}
	h = &Handle{Callable: c, Workers: sortedCopy(workers), refs: 1, owner: w}
	reg.byDigest[c.Digest()] = h
	return h, nil
}

// check validates a registration and, for a callable registered already,
// takes a reference and returns its handle. Caller holds w.mu.
func (reg *Registry) check(c Callable, workers []int) (*Handle, error) {
	w := reg.w
	if err := w.usable("register"); err != nil {
		return nil, err
	}
	if workers != nil && len(workers) == 0 {
		// An empty list would allow no worker at all: a handle nothing can run.
		return nil, Errorf(ValueError, "register: workers must be an explicit non-empty list, or None")
	}
	if workers != nil {
		workers = sortedCopy(workers)
		for i, id := range workers {
			if id < 0 || id >= w.NextCount() {
				return nil, Errorf(ValueError, "register: worker %d out of range (this level-%d worker has NEXT_LEVEL ids 0..%d)", id, w.cfg.Level, w.NextCount()-1)
			}
			if i > 0 && workers[i-1] == id {
				return nil, Errorf(ValueError, "register: worker %d listed twice", id)
			}
		}
	}
	if h, ok := reg.byDigest[c.Digest()]; ok {
		if !sameInts(h.Workers, workers) {
			return nil, Errorf(ValueError, "register: %q is already registered with workers=%v", c.Name(), h.Workers)
		}
		h.refs++
		return h, nil
	}
	return nil, nil
}

// sortedCopy is ids sorted, in a slice of its own (nil stays nil).
func sortedCopy(ids []int) []int {
	if ids == nil {
		return nil
	}
	ids = append([]int(nil), ids...)
	sort.Ints(ids)
	return ids
}

// Unregister drops one reference to h; the last one removes it.
func (reg *Registry) Unregister(h *Handle) error {
	w := reg.w
	w.regMu.Lock()
	defer w.regMu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable("unregister"); err != nil {
		return err
	}
	if h.owner != nil && h.owner != w {
		// Dropping this worker's handle of the same function instead would
		// unregister it here, behind the caller's back.
		return Errorf(ValueError, "unregister: the handle of %q belongs to another worker; unregister it on the worker that registered it", h.Name())
	}
	cur, ok := reg.byDigest[h.Digest()]
	if !ok || cur != h {
		return Errorf(ValueError, "unregister: %q is not registered on this worker", h.Name())
	}
	h.refs--
	if h.refs == 0 {
		delete(reg.byDigest, h.Digest())
	}
	return nil
}

// Lookup returns the handle registered under digest.
func (reg *Registry) Lookup(digest string) (*Handle, bool) {
	reg.w.mu.Lock()
	defer reg.w.mu.Unlock()
	h, ok := reg.byDigest[digest]
	return h, ok
}

func sameInts(a, b []int) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// registerRemote ships c to every remote node, all or nothing: when one
// node refuses, the nodes that took it are told to drop it again.
func (reg *Registry) registerRemote(c Callable) error {
	var took []RemoteNode
	for _, n := range reg.w.tree.remotes() {
		if err := n.Register(c); err != nil {
			for _, done := range took {
				done.Control(&wire.Control{Cmd: wire.CmdUnregister, Digest: c.Digest()})
			}
			return err
		}
		took = append(took, n)
	}
	return nil
}
