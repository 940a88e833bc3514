package engine

import (
	"fmt"
	"slices"
	"sync"

	"simpler/hal"
	"simpler/internal/hostid"
	"simpler/internal/lockorder"
)

// tree is a Worker's NEXT_LEVEL and SUB slots and their lifecycle: the
// plan made before Init (children, remote nodes, worker groups), the
// slots open makes from it, the endpoints that run their members, and
// teardown and kill. open is the one place that reads the mode: it
// decides each slot's kind, and whether the endpoints poll (spin), once.
//
// Locks: the plan and the slots are written under the Worker's regMu
// (AddWorker and friends also under mu, before Init); what reads them
// while the Worker is up (teardown, kill, the accessors) holds mu, never
// across a slot's I/O. epMu guards the endpoints (see below).
type tree struct {
	w *Worker

	// The plan, one entry per NEXT_LEVEL id at level 4 and up: children[id]
	// is nil for a remote node, specs[id] nil for a local one.
	children []*Worker
	specs    []*RemoteSpec
	groups   []*workerGroup // add_worker_group's, in the order added (group.go)

	// The slots, from open to teardown, by id. chips are the NEXT_LEVEL
	// slots of levels 2 and 3, nodes those of level 4 and up; an entry is
	// nil only while a failed open is undone.
	chips []chipSlot
	nodes []nodeSlot
	subs  []slot
	// chipsHere: the chips are in this process, and so are their domains'
	// ranks. spin: endpoints and waiters poll before they block (spin.go):
	// this process runs the members, and wants its cores for them only
	// when they are not in processes of their own. remoteNodes: some
	// NEXT_LEVEL slots are remote (a daemon's session, a group's rank).
	chipsHere, spin, remoteNodes bool

	// remoteFailed counts goroutines completing remote tasks that could
	// not be sent (see remoteEndpoint.Start).
	remoteFailed sync.WaitGroup
	// The endpoints, by id. epMu is held for reading while a deadline or a
	// cancel, which come from timers and other goroutines, hands work to
	// the endpoints, and for writing while close stops them (epStopped),
	// so that neither reaches an endpoint that is gone.
	nextEP, subEP []Endpoint
	epMu          lockorder.RWMutex
	epStopped     bool
	epWG          *sync.WaitGroup
}

// waitPlaces is where a run wait polls (spin.go): in a place of its own
// for the Worker a script drives when every member runs in this process;
// in the endpoints' places when remote nodes run some, or for a child or
// a Worker that serves a parent, whose runs may meet peers elsewhere.
func (t *tree) waitPlaces() *pollers {
	if t.remoteNodes || t.w.attached || t.w.cfg.Served {
		return &endpointPollers
	}
	return &runPollers
}

// next is NEXT_LEVEL slot id.
func (t *tree) next(id int) slot {
	if t.w.cfg.Level >= 4 {
		return t.nodes[id]
	}
	return t.chips[id]
}

// open makes the slots: it opens chips and brings children up, starts
// the child processes, dials the remote nodes. teardown undoes a partial
// open. A worker that needs child processes and has no Spawner is
// refused before anything starts. Caller holds regMu, not mu.
func (t *tree) open() error {
	w := t.w
	if err := t.canSpawn(); err != nil {
		return err
	}
	t.spin = w.cfg.Mode == "thread"
	t.remoteNodes = slices.ContainsFunc(t.specs, func(s *RemoteSpec) bool { return s != nil })
	switch {
	case w.cfg.Mode == "process" && w.cfg.Level <= 3:
		return t.startProcs()
	case w.cfg.Mode == "process" && w.cfg.Level == 4:
		// Level 4 in process mode runs each level-3 child as a process.
		// Level 5 and 6 compose their children in this process; each
		// child's own mode decides how its subtree runs.
		if err := t.startNodes(); err != nil {
			return err
		}
		return t.dialRemotes()
	}
	if err := t.openHere(); err != nil {
		return err
	}
	return t.dialRemotes()
}

// openHere opens the chips and SUB workers of this process and brings
// the local children up.
func (t *tree) openHere() error {
	w := t.w
	t.chipsHere = true
	for range w.cfg.NumSubWorkers {
		t.subs = append(t.subs, hereSub{})
	}
	for _, id := range w.cfg.DeviceIDs {
		c, err := w.cfg.Platform.OpenChip(id)
		if err != nil {
			return err
		}
		t.chips = append(t.chips, newHereChip(c))
	}
	t.nodes = make([]nodeSlot, len(t.children))
	for i, child := range t.children {
		if child != nil {
			t.nodes[i] = &hereNode{child} // before it starts: teardown closes it all the same
		}
	}
	for i, child := range t.children {
		if child == nil {
			continue
		}
		if err := child.start(); err != nil {
			return Wrap(err, fmt.Sprintf("child_worker %d", i))
		}
	}
	return nil
}

// startEndpoints makes the endpoint of every NEXT_LEVEL and SUB slot, of
// the kind the slot is: the slot decides how an assignment runs.
func (t *tree) startEndpoints() {
	t.epWG = &sync.WaitGroup{}
	for id := range t.w.NextCount() {
		t.nextEP = append(t.nextEP, t.next(id).endpoint(t))
	}
	for _, s := range t.subs {
		t.subEP = append(t.subEP, s.endpoint(t))
	}
}

// loop starts a loop endpoint running run. inProc and recorded are what
// the slot's kind says of its members (loopEndpoint).
func (t *tree) loop(run func(e *loopEndpoint, a Assignment) error, inProc, recorded bool) *loopEndpoint {
	e := &loopEndpoint{w: t.w, ch: make(chan Assignment, 1), run: run, wg: t.epWG, spin: t.spin, inProc: inProc, recorded: recorded}
	t.epWG.Add(1)
	go e.loop()
	return e
}

// procs lists the child processes behind the slots.
func (t *tree) procs() []Process {
	var ps []Process
	add := func(s slot) {
		if s != nil && s.process() != nil {
			ps = append(ps, s.process())
		}
	}
	for _, s := range t.chips {
		add(s)
	}
	for _, s := range t.subs {
		add(s)
	}
	for _, s := range t.nodes {
		add(s)
	}
	return ps
}

// remotes lists the remote nodes behind the slots.
func (t *tree) remotes() []RemoteNode {
	var ns []RemoteNode
	for _, s := range t.nodes {
		if s != nil && s.remote() != nil {
			ns = append(ns, s.remote())
		}
	}
	return ns
}

// Nodes is a level-4 or higher Worker's NEXT_LEVEL nodes as the roles
// layered on it reach them (engine/global's broker, engine/remote's
// buffers): what each node is, where it runs and how it is commanded.
// It is a view of the Worker's tree and keeps no state of its own.
type Nodes struct{ w *Worker }

// Nodes is the worker's NEXT_LEVEL nodes.
func (w *Worker) Nodes() Nodes { return Nodes{w} }

// slot is node id while the tree is up, or nil.
func (ns Nodes) slot(id int) nodeSlot {
	w := ns.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if id < 0 || id >= len(w.tree.nodes) {
		return nil
	}
	return w.tree.nodes[id]
}

// IsRemote reports whether node id is a remote node (from AddRemoteWorker
// or AddWorkerGroup on).
func (ns Nodes) IsRemote(id int) bool { return ns.w.tree.isRemote(id) }

// Node is node id as a Node: what a broker sends global-domain commands
// to. Before Init and after close it answers every command with an error.
func (ns Nodes) Node(id int) Node {
	if n := ns.slot(id); n != nil {
		return n.node()
	}
	return goneNode{id}
}

// Host is the host node id runs on: a remote node's, as it said when it
// came up; a local child's is this one.
func (ns Nodes) Host(id int) hostid.ID {
	if n := ns.slot(id); n != nil {
		return n.host()
	}
	return hostid.Local()
}

// Remote is node id's remote node from Init to close; nil for a local
// id, and before Init and after close. A role that commands remote nodes
// (remote buffers) reaches them here.
func (ns Nodes) Remote(id int) RemoteNode {
	if n := ns.slot(id); n != nil {
		return n.remote()
	}
	return nil
}

// Spec is what a broker knows of node id, in the form a remote node is
// described in: platform, chips, comm profile, global device ranks. (A
// level-4 or deeper child has no chips.)
func (ns Nodes) Spec(id int) RemoteSpec {
	t := &ns.w.tree
	if t.isRemote(id) {
		return *t.specs[id]
	}
	c := t.children[id].cfg
	profile := c.CommProfile
	if profile == "" {
		profile = hal.SimProfile
	}
	return RemoteSpec{Platform: c.Platform.Name(), DeviceIDs: c.DeviceIDs, CommProfile: profile, GlobalDeviceRanks: c.GlobalDeviceRanks}
}

// isRemote reports whether NEXT_LEVEL id is a remote node: the plan
// says, from before Init.
func (t *tree) isRemote(id int) bool {
	return id >= 0 && id < len(t.specs) && t.specs[id] != nil
}

// raceTag is the race detector's tag of chip id's memory (the chip of
// this process, or the process that runs it), 0 without --race or off a
// chip.
func (t *tree) raceTag(id int) uintptr {
	if t.w.cfg.Race == nil || id < 0 || id >= len(t.chips) || t.chips[id] == nil {
		return 0
	}
	return t.chips[id].raceTag(t.w.cfg.Race)
}
