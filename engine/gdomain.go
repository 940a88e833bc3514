package engine

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"simpler/hal/comm"
	"simpler/internal/fault"
	"simpler/wire"
)

// GlobalSpec is what allocate_global_domain asks for.
type GlobalSpec struct {
	Name           string
	Members        [][2]int // (node worker id, local chip id); rank r is Members[r]
	WindowSize     int
	Buffers        []BufferSpec
	RetainAfterRun bool
}

// MaxGlobalMembers bounds a global domain: the descriptor tables and the
// commands that carry ranks are bounded by the same number (wire.MaxRanks,
// which the engine checks at compile time), and so are hal/comm's rank
// counts.
const MaxGlobalMembers = wire.MaxRanks

// GlobalDomain is a communication domain across level-3 nodes, brokered by
// a level-4 (or higher) worker: the GlobalCommDomainHandle.
type GlobalDomain struct {
	w       *Worker
	run     *Run
	spec    GlobalSpec
	id, gen uint64
	offsets []int
	nodes   []int // nodes hosting ranks, in first-member order
	// devRanks is each rank's global device rank; topology hashes the
	// whole placement (see Topology).
	devRanks []int
	topology string

	// mu guards life (lifetime.go). It is a leaf: nothing else is locked
	// while it is held (the name check takes it under w.mu), and it is
	// never held across a node command.
	mu      sync.Mutex
	life    lifetime
	pending bool // under w.mu: the name is reserved, the transaction not done
	// warm is the broker's entry of this domain's pooled windows (gwarm.go),
	// idle again once the domain is freed; nil if its windows are not all
	// pooled.
	warm *gwarmEntry
}

// ID is the domain id nodes know it by; Generation its attempt.
func (d *GlobalDomain) ID() uint64         { return d.id }
func (d *GlobalDomain) Generation() uint64 { return d.gen }
func (d *GlobalDomain) Spec() GlobalSpec   { return d.spec }

// BufferRange is where buffer name lies in every member's window; a
// released handle refuses it.
func (d *GlobalDomain) BufferRange(name string) (int, int, error) {
	if err := d.usable("buffer_range"); err != nil {
		return 0, 0, err
	}
	return d.bufferRange(name)
}

func (d *GlobalDomain) bufferRange(name string) (int, int, error) {
	for i, b := range d.spec.Buffers {
		if b.Name == name {
			return d.offsets[i], b.NBytes, nil
		}
	}
	return 0, 0, Errorf(KeyError, "global domain %q has no buffer %q", d.spec.Name, name)
}

// DeviceRanks is each domain rank's global device rank: its node's
// explicit global_device_ranks, or else its place in node order among
// the ranks no node gave explicitly (Worker.globalDeviceRanks).
func (d *GlobalDomain) DeviceRanks() []int { return d.devRanks }

// Topology is the canonical topology hash: "sha256:" over the profile,
// the broker's cluster id, the size and every rank's (node, local worker,
// global device rank).
func (d *GlobalDomain) Topology() string { return d.topology }

// Released and Freed report the handle's state.
func (d *GlobalDomain) Released() bool { d.mu.Lock(); defer d.mu.Unlock(); return d.life.released() }
func (d *GlobalDomain) Freed() bool    { d.mu.Lock(); defer d.mu.Unlock(); return d.life.freed() }

// usable refuses op on a released handle, as a released local domain
// refuses indexing: nothing may be handed to new work once release() was
// called, even before the fence frees the windows.
func (d *GlobalDomain) usable(op string) error {
	if d.Released() {
		return Errorf(RuntimeError, "%s: global domain %q was released", op, d.spec.Name)
	}
	return nil
}

// Member is the (node, local worker) pair hosting domain rank r.
func (d *GlobalDomain) Member(rank int) ([2]int, error) {
	if err := d.usable("member"); err != nil {
		return [2]int{}, err
	}
	if rank < 0 || rank >= len(d.spec.Members) {
		return [2]int{}, Errorf(IndexError, "member: rank %d out of range (0..%d)", rank, len(d.spec.Members)-1)
	}
	return d.spec.Members[rank], nil
}

// AllocateGlobalDomain validates spec, reserves its name and runs the
// transaction over the member nodes (transact). Every refusal comes
// before any node is sent anything.
func (o *Orchestrator) AllocateGlobalDomain(spec GlobalSpec) (*GlobalDomain, error) {
	w := o.w
	if w.cfg.Level < 4 {
		return nil, Errorf(ValueError, "allocate_global_domain: a global domain is brokered by a level-4 or higher worker (this one is level %d)", w.cfg.Level)
	}
	offsets, err := w.validateGlobal(&spec)
	if err != nil {
		return nil, err
	}
	devRanks, topology, err := w.assignTopology(spec.Members)
	if err != nil {
		return nil, err
	}
	d, err := o.reserveGlobal(spec, offsets, devRanks, topology)
	if err != nil {
		return nil, err
	}
	if err := d.transact(); err != nil {
		w.mu.Lock()
		delete(w.gdomains, d.id)
		w.mu.Unlock()
		return nil, err
	}
	w.mu.Lock()
	d.pending = false
	o.run.globals = append(o.run.globals, d)
	w.mu.Unlock()
	return d, nil
}

// reserveGlobal makes the handle and reserves its name among the
// worker's live global domains, before any node is sent anything: a name
// may be reused once its domain is released. Allocation may follow submits
// in the same run (one per collective call): it touches no memory a
// running task uses.
func (o *Orchestrator) reserveGlobal(spec GlobalSpec, offsets, devRanks []int, topology string) (*GlobalDomain, error) {
	const op = "allocate_global_domain"
	w := o.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := o.building(op); err != nil {
		return nil, err
	}
	for _, live := range w.gdomains {
		if live.spec.Name == spec.Name && !live.Released() {
			return nil, Errorf(ValueError, "%s: a global domain named %q is already live (domain_id %d); release it first", op, spec.Name, live.id)
		}
	}
	w.globalSeq++
	d := &GlobalDomain{w: w, run: o.run, spec: spec, id: w.globalSeq, gen: 1, offsets: offsets, devRanks: devRanks, topology: topology, pending: true}
	w.gdomains[d.id] = d
	return d, nil
}

// transact runs the transaction over the member nodes (gtxn.go). On any
// failure every prepared node is aborted and the first error returned; an
// abort that fails poisons the worker.
func (d *GlobalDomain) transact() error {
	spec := d.spec
	places := make(map[int][]GlobalPlace, 2) // by node: most domains span one or two
	ranks := make(map[int][]int, 2)
	for r, m := range spec.Members {
		if places[m[0]] == nil {
			d.nodes = append(d.nodes, m[0])
		}
		places[m[0]] = append(places[m[0]], GlobalPlace{Rank: r, Local: m[1]})
		ranks[m[0]] = append(ranks[m[0]], r)
	}
	key := gwarmKey(spec.Members, spec.WindowSize)
	t, warm := newGtxn(d.nodes, ranks, len(spec.Members)), d.w.gwarm.take(key)
	if warm != nil {
		t = newWarmGtxn(d.nodes, ranks, len(spec.Members))
	}
	for batch, ok := t.Next(); ok; batch, ok = t.Next() {
		// The table every node of IMPORT's or REATTACH's batch gets, encoded
		// once: complete before IMPORT's batch, unchanged during it.
		var table wire.DescriptorTable
		switch batch[0].Op {
		case opGlobalImport:
			table = WireDescriptors(t.Table())
		case opGlobalReattach:
			table = WireDescriptors(warm.table(d.id, batch[0].Gen, spec.WindowSize))
		}
		descs := make([][]comm.Descriptor, len(batch))
		errs := make([]error, len(batch))
		run := d.remoteFirst(len(batch), func(i int) int { return batch[i].Node })
		each(len(batch), func(k int) {
			i := run[k]
			s := batch[i]
			descs[i], errs[i] = d.step(s, places[s.Node], table)
		})
		for i, s := range batch {
			t.Done(s, descs[i], errs[i])
		}
	}
	if err := t.AbortErr(); err != nil {
		d.w.Poison(Wrap(err, fmt.Sprintf("aborting global domain %q", spec.Name)))
	}
	d.settleWarm(t, key, warm)
	return t.Err()
}

// settleWarm updates the broker's warm entries once the transaction has
// ended: a REATTACH that worked keeps its entry for the domain; one that
// failed forgets it; a full transaction that committed remembers its
// windows (if all are pooled).
func (d *GlobalDomain) settleWarm(t *gtxn, key string, warm *gwarmEntry) {
	d.gen = t.Gen()
	switch {
	case t.Err() == nil && t.Warm():
		d.warm = warm
		return
	case warm != nil:
		d.w.gwarm.drop(warm)
	}
	if t.Err() == nil {
		d.warm = d.w.gwarm.add(key, t.Table())
	}
}

// step sends one transaction command to a node.
func (d *GlobalDomain) step(s gtxnStep, places []GlobalPlace, table wire.DescriptorTable) ([]comm.Descriptor, error) {
	r, err := d.nodeCmd(s.Node, d.command(s, places, table))
	var descs []comm.Descriptor
	if err == nil && s.Op == opGlobalPrepare {
		descs, err = decodeDescs(r.Data)
	}
	if err != nil {
		err = Wrap(err, fmt.Sprintf("%s on node %d", s.Op, s.Node))
	}
	return descs, err
}

// command is the CONTROL form of one transaction step for a node hosting
// places.
func (d *GlobalDomain) command(s gtxnStep, places []GlobalPlace, table wire.DescriptorTable) *wire.Control {
	op := s.Op
	c := &wire.Control{Cmd: gtxnCommands[op], Domain: wire.Domain{ID: d.id, Generation: s.Gen}}
	switch op {
	case opGlobalCommInit, opGlobalPrepare, opGlobalReattach: // only these carry the ranks
		c.Domain.Size = len(d.spec.Members)
		c.Domain.Ranks = make([]wire.DomainRank, 0, len(places))
		for _, p := range places {
			c.Domain.Ranks = append(c.Domain.Ranks, wire.DomainRank{Rank: uint32(p.Rank), Worker: uint32(p.Local)})
		}
		if op != opGlobalCommInit {
			c.Domain.WindowSize = uint64(d.spec.WindowSize)
		}
		switch op {
		case opGlobalPrepare:
			c.Domain.Table = encodePrepareExtra(d.spec.Name, d.spec.Buffers)
		case opGlobalCommInit:
			c.Domain.Table = wire.Payload(d.nodeTopology(s.Node, places))
		default:
			c.Domain.Table = wire.Payload(&wire.Reattach{Topology: *d.nodeTopology(s.Node, places),
				Extra: prepareExtra(d.spec.Name, d.spec.Buffers), Descriptors: table})
		}
	case opGlobalImport:
		c.Domain.Table = wire.Payload(&table)
	}
	return c
}

// nodeTopology is what COMM_INIT (or REATTACH) tells node, hosting places,
// of the domain's placement.
func (d *GlobalDomain) nodeTopology(node int, places []GlobalPlace) *wire.Topology {
	t := nodeTopology{Cluster: d.w.clusterID(), NodeRank: slices.Index(d.nodes, node), Nodes: len(d.nodes), Hash: d.topology}
	for _, p := range places {
		t.DeviceRanks = append(t.DeviceRanks, d.devRanks[p.Rank])
	}
	return t.wire()
}

// gtxnCommands is the command each transaction step sends.
var gtxnCommands = map[gtxnOp]wire.Command{opGlobalCommInit: wire.CmdCommInit, opGlobalPrepare: wire.CmdPrepare,
	opGlobalImport: wire.CmdImportTable, opGlobalCommit: wire.CmdCommit, opGlobalAbort: wire.CmdAbort,
	opGlobalReattach: wire.CmdReattach}

// nodeCmd runs a global-domain command on a member node, after the
// command's fault point for that node: over CONTROL for a remote node,
// through the mailbox for a process-mode local one, and by a call for a
// local node in this process. Every kind of node serves the same commands
// with the same code (GlobalCommand), and the broker times each one (a
// GlobalStep event).
func (d *GlobalDomain) nodeCmd(node int, c *wire.Control) (wire.ControlReply, error) {
	w := d.w
	start := time.Now()
	var r wire.ControlReply
	err := fault.Hit(globalFaultPoints[c.Cmd], node)
	if err == nil {
		r, err = w.nodeOf(node).Command(c)
	}
	if w.observer != nil {
		w.emit(Event{Kind: GlobalStep, Worker: w.workerName(NextLevel, node), Callable: c.Cmd.String(), Domain: d.spec.Name, AllocID: d.id, Dur: time.Since(start), Err: err})
	}
	return r, err
}

// Release lets the domain go. It is bound to the run that allocated it: it
// never frees under that run's DAG, so before the fence it only marks the
// handle; after it (a retained domain) it frees now, or at the fence of a
// run being built, which may use it. A release that fails leaves the
// handle released and not freed; calling Release again retries it (the
// rule: lifetime).
func (d *GlobalDomain) Release() error {
	d.mu.Lock()
	d.life.release()
	freed := d.life.freed()
	d.mu.Unlock()
	if freed {
		return nil
	}
	w := d.w
	w.mu.Lock()
	if !d.run.retired {
		w.mu.Unlock()
		return nil // its own run's fence frees it
	}
	for r := range w.runs { // a retained domain: a run being built may use it
		if r.core.Building() {
			r.globals = append(r.globals, d)
			w.mu.Unlock()
			return nil
		}
	}
	w.mu.Unlock()
	return d.free(false)
}

// free releases the domain on every node, each invalidating its view
// before its windows go. One caller frees; the others wait for it and get
// its result. A failed free can be retried, since a node keeps its domain
// until its RELEASE has run and ignores a repeat, unless last says no
// later call will (the Worker's close): then it poisons the Worker.
func (d *GlobalDomain) free(last bool) error {
	d.mu.Lock()
	a, run := d.life.begin()
	d.mu.Unlock()
	if !run {
		<-a.done
		return a.err
	}
	err := d.releaseOnNodes()
	retry := !last
	if _, poison := outcome(err, retry); poison {
		d.w.Poison(err)
	}
	if d.warm != nil { // its windows are idle again, or in doubt
		if err == nil {
			d.w.gwarm.idle(d.warm)
		} else {
			d.w.gwarm.drop(d.warm)
		}
		d.warm = nil
	}
	if err == nil {
		d.w.mu.Lock()
		delete(d.w.gdomains, d.id)
		d.w.mu.Unlock()
	}
	d.mu.Lock()
	d.life.end(a, err, retry)
	d.mu.Unlock()
	return err
}

// releaseOnNodes sends RELEASE_DOMAIN to every node hosting ranks, all
// at once, and returns the first failure in node order.
func (d *GlobalDomain) releaseOnNodes() error {
	errs := make([]error, len(d.nodes))
	run := d.remoteFirst(len(d.nodes), func(i int) int { return d.nodes[i] })
	each(len(d.nodes), func(k int) {
		i := run[k]
		n := d.nodes[i]
		_, err := d.nodeCmd(n, &wire.Control{Cmd: wire.CmdReleaseDomain, Domain: wire.Domain{ID: d.id, Generation: d.gen}})
		if err != nil {
			errs[i] = Wrap(err, fmt.Sprintf("releasing global domain %q on node %d", d.spec.Name, n))
		}
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// remoteFirst is the order in which each runs the n commands of a phase
// (node(i) is command i's node): one to a remote node first, which each
// runs on the calling goroutine at once, so the slowest command goes out
// before any other work and its reply wakes the caller itself; then the
// rest in node order. (The answers are recorded by index, so the order
// decides nothing else.)
func (d *GlobalDomain) remoteFirst(n int, node func(i int) int) []int {
	run := make([]int, 0, n)
	for i := 0; i < n; i++ {
		if d.w.IsRemote(node(i)) {
			run = append(run, i)
			break
		}
	}
	for i := 0; i < n; i++ {
		if len(run) == 0 || i != run[0] {
			run = append(run, i)
		}
	}
	return run
}

// each runs f(0..n-1) concurrently, f(0) on the calling goroutine, and
// returns when every call has: one phase of node commands in flight
// together, each node's on its own goroutine. Every node command is
// bounded (a remote node's by its reply timeout, a child's by its
// liveness watch), so the wait is too.
func each(n int, f func(i int)) {
	if n == 0 {
		return
	}
	var wg sync.WaitGroup
	wg.Add(n - 1)
	for i := 1; i < n; i++ {
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	f(0) // a remote node's command, if any (remoteFirst): it waits on I/O, and the others run meanwhile
	wg.Wait()
}

// freeGlobals runs at a run's fence: its global domains are released,
// except retained ones not released yet.
func (w *Worker) freeGlobals(r *Run) error {
	w.mu.Lock()
	gs := r.globals
	r.globals = nil
	w.mu.Unlock()
	var first error
	for i := len(gs) - 1; i >= 0; i-- {
		d := gs[i]
		if d.spec.RetainAfterRun && !d.Released() {
			continue
		}
		if err := d.free(false); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// closeGlobalDomains releases every brokered domain not yet freed: the
// live ones, and those whose free failed (their last retry).
func (w *Worker) closeGlobalDomains() error {
	w.mu.Lock()
	ds := make([]*GlobalDomain, 0, len(w.gdomains))
	for _, d := range w.gdomains {
		if !d.pending { // no transaction runs at close: runs have drained
			ds = append(ds, d)
		}
	}
	w.mu.Unlock()
	var first error
	for _, d := range ds {
		if err := d.free(true); err != nil && first == nil {
			first = err
		}
	}
	return first
}
