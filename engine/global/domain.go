package global

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"simpler/engine"
	"simpler/engine/internal/lifetime"
	"simpler/hal/comm"
	"simpler/internal/fault"
	"simpler/wire"
)

// Spec is what allocate_global_domain asks for.
type Spec struct {
	Name           string
	Members        [][2]int // (node worker id, local chip id); rank r is Members[r]
	WindowSize     int
	Buffers        []engine.BufferSpec
	RetainAfterRun bool
}

// MaxMembers bounds a global domain: the descriptor tables and the
// commands that carry ranks are bounded by the same number (wire.MaxRanks),
// and so are hal/comm's rank counts.
const MaxMembers = wire.MaxRanks

// broker is a level-4 (or higher) worker's global domains: its Role.
type broker struct {
	w *engine.Worker
	// mu guards live, seq and runs. It comes before a Domain's mu (the
	// name check reads each live domain's state under it).
	mu   sync.Mutex
	live map[uint64]*Domain        // brokered and not yet freed
	seq  uint64                    // the last domain id
	runs map[*engine.Run][]*Domain // each run's domains, for its fence
	warm warmCache                 // pooled window names of freed domains (warm.go)
	once sync.Once                 // registers close
}

// roleKey names this package's roles on a Worker.
type roleKey uint8

const (
	brokerRole roleKey = iota
	nodeRole
)

// brokerOf is w's broker, made the first time w brokers a domain.
func brokerOf(w *engine.Worker) *broker {
	b := w.Role(brokerRole, func() any {
		return &broker{w: w, live: map[uint64]*Domain{}, runs: map[*engine.Run][]*Domain{}}
	}).(*broker)
	b.once.Do(func() { w.OnClose(engine.CloseAfterDrain, brokerRole, b.close) })
	return b
}

// Domain is a communication domain across level-3 nodes, brokered by a
// level-4 (or higher) worker: the GlobalCommDomainHandle.
type Domain struct {
	b       *broker
	run     *engine.Run
	spec    Spec
	id, gen uint64
	offsets []int
	nodes   []int // nodes hosting ranks, in first-member order
	// devRanks is each rank's global device rank; topology hashes the
	// whole placement (see Topology).
	devRanks []int
	topology string

	// mu guards life (engine/internal/lifetime). It is a leaf, never held
	// across a node command.
	mu      sync.Mutex
	life    lifetime.Life
	pending bool // under b.mu: the name is reserved, the transaction not done
	// warm is the broker's entry of this domain's pooled windows (warm.go),
	// idle again once the domain is freed; nil if its windows are not all
	// pooled.
	warm *warmEntry
}

// ID is the domain id nodes know it by; Generation its attempt.
func (d *Domain) ID() uint64         { return d.id }
func (d *Domain) Generation() uint64 { return d.gen }
func (d *Domain) Spec() Spec         { return d.spec }

// BufferRange is where buffer name lies in every member's window; a
// released handle refuses it.
func (d *Domain) BufferRange(name string) (int, int, error) {
	if err := d.usable("buffer_range"); err != nil {
		return 0, 0, err
	}
	return d.bufferRange(name)
}

func (d *Domain) bufferRange(name string) (int, int, error) {
	for i, b := range d.spec.Buffers {
		if b.Name == name {
			return d.offsets[i], b.NBytes, nil
		}
	}
	return 0, 0, engine.Errorf(engine.KeyError, "global domain %q has no buffer %q", d.spec.Name, name)
}

// DeviceRanks is each domain rank's global device rank: its node's
// explicit global_device_ranks, or else its place in node order among
// the ranks no node gave explicitly (deviceRanks).
func (d *Domain) DeviceRanks() []int { return d.devRanks }

// Topology is the canonical topology hash: "sha256:" over the profile,
// the broker's cluster id, the size and every rank's (node, local worker,
// global device rank).
func (d *Domain) Topology() string { return d.topology }

// Released and Freed report the handle's state.
func (d *Domain) Released() bool { d.mu.Lock(); defer d.mu.Unlock(); return d.life.Released() }
func (d *Domain) Freed() bool    { d.mu.Lock(); defer d.mu.Unlock(); return d.life.Freed() }

// usable refuses op on a released handle, as a released local domain
// refuses indexing: nothing may be handed to new work once release() was
// called, even before the fence frees the windows.
func (d *Domain) usable(op string) error {
	if d.Released() {
		return engine.Errorf(engine.RuntimeError, "%s: global domain %q was released", op, d.spec.Name)
	}
	return nil
}

// Member is the (node, local worker) pair hosting domain rank r.
func (d *Domain) Member(rank int) ([2]int, error) {
	if err := d.usable("member"); err != nil {
		return [2]int{}, err
	}
	if rank < 0 || rank >= len(d.spec.Members) {
		return [2]int{}, engine.Errorf(engine.IndexError, "member: rank %d out of range (0..%d)", rank, len(d.spec.Members)-1)
	}
	return d.spec.Members[rank], nil
}

// Allocate validates spec, reserves its name among o's worker's live
// global domains and runs the transaction over the member nodes
// (transact); the domain belongs to o's run, whose fence frees it unless
// it is retained. Every refusal comes before any node is sent anything.
func Allocate(o *engine.Orchestrator, spec Spec) (*Domain, error) {
	w := o.Worker()
	if w.Level() < 4 {
		return nil, engine.Errorf(engine.ValueError, "allocate_global_domain: a global domain is brokered by a level-4 or higher worker (this one is level %d)", w.Level())
	}
	offsets, err := validate(w, &spec)
	if err != nil {
		return nil, err
	}
	devRanks, topology, err := assignTopology(w, spec.Members)
	if err != nil {
		return nil, err
	}
	b := brokerOf(w)
	d, err := b.reserve(o, spec, offsets, devRanks, topology)
	if err != nil {
		return nil, err
	}
	if err := d.transact(); err != nil {
		b.forget(d)
		return nil, err
	}
	b.mu.Lock()
	d.pending = false
	b.mu.Unlock()
	if err := b.adopt(o.Run(), d); err != nil {
		return nil, err
	}
	return d, nil
}

// reserve makes the handle and reserves its name among the broker's live
// global domains, before any node is sent anything: a name may be reused
// once its domain is released. Allocation may follow submits in the same
// run (one per collective call): it touches no memory a running task uses.
func (b *broker) reserve(o *engine.Orchestrator, spec Spec, offsets, devRanks []int, topology string) (*Domain, error) {
	const op = "allocate_global_domain"
	if err := o.Building(op); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, live := range b.live {
		if live.spec.Name == spec.Name && !live.Released() {
			return nil, engine.Errorf(engine.ValueError, "%s: a global domain named %q is already live (domain_id %d); release it first", op, spec.Name, live.id)
		}
	}
	b.seq++
	d := &Domain{b: b, run: o.Run(), spec: spec, id: b.seq, gen: 1, offsets: offsets, devRanks: devRanks, topology: topology, pending: true}
	b.live[d.id] = d
	return d, nil
}

// forget drops d from the live domains: its transaction failed, or it
// was freed.
func (b *broker) forget(d *Domain) {
	b.mu.Lock()
	delete(b.live, d.id)
	b.mu.Unlock()
}

// adopt makes r's fence free d (unless retained and not released). A run
// already past its fence cannot take it: then it is freed now, as that
// fence would have.
func (b *broker) adopt(r *engine.Run, d *Domain) error {
	b.mu.Lock()
	b.runs[r] = append(b.runs[r], d)
	b.mu.Unlock()
	if r.OnFence(engine.FenceGlobal, b, func() error { return b.freeRun(r) }) {
		return nil
	}
	return b.freeRun(r)
}

// freeRun runs at a run's fence: its global domains are released, last
// allocated first, except retained ones not released yet. Its error
// becomes the run's; it is retryable (the domain stays released, and the
// next Release or the close frees it: engine/internal/lifetime).
func (b *broker) freeRun(r *engine.Run) error {
	b.mu.Lock()
	ds := b.runs[r]
	delete(b.runs, r)
	b.mu.Unlock()
	var first error
	for i := len(ds) - 1; i >= 0; i-- {
		d := ds[i]
		if d.spec.RetainAfterRun && !d.Released() {
			continue
		}
		if err := d.free(false); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// close releases every brokered domain not yet freed, once every run has
// drained: the live ones, and those whose free failed (their last retry).
func (b *broker) close() error {
	b.mu.Lock()
	ds := make([]*Domain, 0, len(b.live))
	for _, d := range b.live {
		if !d.pending { // no transaction runs at close: runs have drained
			ds = append(ds, d)
		}
	}
	b.mu.Unlock()
	var first error
	for _, d := range ds {
		if err := d.free(true); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// transact runs the transaction over the member nodes (txn.go). On any
// failure every prepared node is aborted and the first error returned; an
// abort that fails poisons the worker.
func (d *Domain) transact() error {
	spec := d.spec
	places := make(map[int][]Place, 2) // by node: most domains span one or two
	ranks := make(map[int][]int, 2)
	for r, m := range spec.Members {
		if places[m[0]] == nil {
			d.nodes = append(d.nodes, m[0])
		}
		places[m[0]] = append(places[m[0]], Place{Rank: r, Local: m[1]})
		ranks[m[0]] = append(ranks[m[0]], r)
	}
	key := warmKey(spec.Members, spec.WindowSize)
	t, warm := newTxn(d.nodes, ranks, len(spec.Members)), d.b.warm.take(key)
	if warm != nil {
		t = newWarmTxn(d.nodes, ranks, len(spec.Members))
	}
	for batch, ok := t.Next(); ok; batch, ok = t.Next() {
		d.runBatch(t, batch, places, d.batchTable(t, batch[0], warm))
	}
	if err := t.AbortErr(); err != nil {
		d.b.w.Poison(engine.Wrap(err, fmt.Sprintf("aborting global domain %q", spec.Name)))
	}
	d.settleWarm(t, key, warm)
	return t.Err()
}

// batchTable is the table every node of IMPORT's or REATTACH's batch
// gets, encoded once: complete before IMPORT's batch, unchanged during it.
func (d *Domain) batchTable(t *txn, s txnStep, warm *warmEntry) wire.DescriptorTable {
	switch s.Op {
	case opImport:
		return engine.WireDescriptors(t.Table())
	case opReattach:
		return engine.WireDescriptors(warm.table(d.id, s.Gen, d.spec.WindowSize))
	}
	return wire.DescriptorTable{}
}

// runBatch sends one phase's steps to their nodes together and hands
// every answer to the transaction.
func (d *Domain) runBatch(t *txn, batch []txnStep, places map[int][]Place, table wire.DescriptorTable) {
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

// settleWarm updates the broker's warm entries once the transaction has
// ended: a REATTACH that worked keeps its entry for the domain; one that
// failed forgets it; a full transaction that committed remembers its
// windows (if all are pooled).
func (d *Domain) settleWarm(t *txn, key string, warm *warmEntry) {
	d.gen = t.Gen()
	switch {
	case t.Err() == nil && t.Warm():
		d.warm = warm
		return
	case warm != nil:
		d.b.warm.drop(warm)
	}
	if t.Err() == nil {
		d.warm = d.b.warm.add(key, t.Table())
	}
}

// step sends one transaction command to a node.
func (d *Domain) step(s txnStep, places []Place, table wire.DescriptorTable) ([]comm.Descriptor, error) {
	r, err := d.nodeCmd(s.Node, d.command(s, places, table))
	var descs []comm.Descriptor
	if err == nil && s.Op == opPrepare {
		descs, err = decodeDescs(r.Data)
	}
	if err != nil {
		err = engine.Wrap(err, fmt.Sprintf("%s on node %d", s.Op, s.Node))
	}
	return descs, err
}

// command is the CONTROL form of one transaction step for a node hosting
// places.
func (d *Domain) command(s txnStep, places []Place, table wire.DescriptorTable) *wire.Control {
	op := s.Op
	c := &wire.Control{Cmd: txnCommands[op], Domain: wire.Domain{ID: d.id, Generation: s.Gen}}
	switch op {
	case opCommInit, opPrepare, opReattach: // only these carry the ranks
		c.Domain.Size = len(d.spec.Members)
		c.Domain.Ranks = make([]wire.DomainRank, 0, len(places))
		for _, p := range places {
			c.Domain.Ranks = append(c.Domain.Ranks, wire.DomainRank{Rank: uint32(p.Rank), Worker: uint32(p.Local)})
		}
		if op != opCommInit {
			c.Domain.WindowSize = uint64(d.spec.WindowSize)
		}
		switch op {
		case opPrepare:
			c.Domain.Table = encodePrepareExtra(d.spec.Name, d.spec.Buffers)
		case opCommInit:
			c.Domain.Table = wire.Payload(d.nodeTopology(s.Node, places))
		default:
			c.Domain.Table = wire.Payload(&wire.Reattach{Topology: *d.nodeTopology(s.Node, places),
				Extra: prepareExtra(d.spec.Name, d.spec.Buffers), Descriptors: table})
		}
	case opImport:
		c.Domain.Table = wire.Payload(&table)
	}
	return c
}

// nodeTopology is what COMM_INIT (or REATTACH) tells node, hosting places,
// of the domain's placement.
func (d *Domain) nodeTopology(node int, places []Place) *wire.Topology {
	t := nodeTopology{Cluster: d.b.w.ClusterID(), NodeRank: slices.Index(d.nodes, node), Nodes: len(d.nodes), Hash: d.topology}
	for _, p := range places {
		t.DeviceRanks = append(t.DeviceRanks, d.devRanks[p.Rank])
	}
	return t.wire()
}

// txnCommands is the command each transaction step sends.
var txnCommands = map[txnOp]wire.Command{opCommInit: wire.CmdCommInit, opPrepare: wire.CmdPrepare,
	opImport: wire.CmdImportTable, opCommit: wire.CmdCommit, opAbort: wire.CmdAbort,
	opReattach: wire.CmdReattach}

// nodeCmd runs a global-domain command on a member node, after the
// command's fault point for that node: over CONTROL for a remote node,
// through the mailbox for a process-mode local one, and by a call for a
// local node in this process (engine.Nodes.Node). Every kind of node
// serves the same commands with the same code (command, in node.go), and
// the broker times each one (a GlobalStep event).
func (d *Domain) nodeCmd(node int, c *wire.Control) (wire.ControlReply, error) {
	w := d.b.w
	start := time.Now()
	var r wire.ControlReply
	err := fault.Hit(faultPoints[c.Cmd], node)
	if err == nil {
		r, err = w.Nodes().Node(node).Command(c)
	}
	w.EmitNodeStep(node, engine.Event{Kind: engine.GlobalStep, Callable: c.Cmd.String(), Domain: d.spec.Name, AllocID: d.id, Err: err}, start)
	return r, err
}

// Release lets the domain go. It is bound to the run that allocated it: it
// never frees under that run's DAG, so before the fence it only marks the
// handle; after it (a retained domain) it frees now, or at the fence of a
// run being built, which may use it. A release that fails leaves the
// handle released and not freed; calling Release again retries it (the
// rule: engine/internal/lifetime).
func (d *Domain) Release() error {
	d.mu.Lock()
	d.life.Release()
	freed := d.life.Freed()
	d.mu.Unlock()
	if freed {
		return nil
	}
	b := d.b
	if d.run.OnFence(engine.FenceGlobal, b, func() error { return b.freeRun(d.run) }) {
		return nil // its own run's fence frees it
	}
	if r := b.w.BuildingRun(); r != nil { // a retained domain: a run being built may use it
		return b.adopt(r, d)
	}
	return d.free(false)
}

// free releases the domain on every node, each invalidating its view
// before its windows go. One caller frees; the others wait for it and get
// its result. A failed free can be retried, since a node keeps its domain
// until its RELEASE has run and ignores a repeat, unless last says no
// later call will (the Worker's close): then it poisons the Worker.
func (d *Domain) free(last bool) error {
	d.mu.Lock()
	a, run := d.life.Begin()
	d.mu.Unlock()
	if !run {
		return a.Wait()
	}
	err := d.releaseOnNodes()
	retry := !last
	if _, poison := lifetime.Outcome(err, retry); poison {
		d.b.w.Poison(err)
	}
	if d.warm != nil { // its windows are idle again, or in doubt
		if err == nil {
			d.b.warm.idle(d.warm)
		} else {
			d.b.warm.drop(d.warm)
		}
		d.warm = nil
	}
	if err == nil {
		d.b.forget(d)
	}
	d.mu.Lock()
	d.life.End(a, err, retry)
	d.mu.Unlock()
	return err
}

// releaseOnNodes sends RELEASE_DOMAIN to every node hosting ranks, all
// at once, and returns the first failure in node order.
func (d *Domain) releaseOnNodes() error {
	errs := make([]error, len(d.nodes))
	run := d.remoteFirst(len(d.nodes), func(i int) int { return d.nodes[i] })
	each(len(d.nodes), func(k int) {
		i := run[k]
		n := d.nodes[i]
		_, err := d.nodeCmd(n, &wire.Control{Cmd: wire.CmdReleaseDomain, Domain: wire.Domain{ID: d.id, Generation: d.gen}})
		if err != nil {
			errs[i] = engine.Wrap(err, fmt.Sprintf("releasing global domain %q on node %d", d.spec.Name, n))
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
func (d *Domain) remoteFirst(n int, node func(i int) int) []int {
	run := make([]int, 0, n)
	for i := 0; i < n; i++ {
		if d.b.w.Nodes().IsRemote(node(i)) {
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
