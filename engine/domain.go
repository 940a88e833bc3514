package engine

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"simpler/engine/internal/lifetime"
	"simpler/hal"
	"simpler/hal/comm"
	"simpler/hal/dtype"
	"simpler/internal/fault"
)

// BufferSpec names a slice of a domain window, carved in declaration order
// from the window base.
type BufferSpec struct {
	Name   string
	DType  dtype.DType
	Count  int
	NBytes int
}

// DomainSpec is what allocate_domain asks for.
type DomainSpec struct {
	Name       string
	Workers    []int // NEXT_LEVEL (chip) ids; rank r is Workers[r]
	WindowSize int
	Buffers    []BufferSpec
	// TaskOnly marks a domain that no host staging will touch: only tasks
	// submitted after it use its windows. It may be allocated after the
	// run's first submit (collectives allocate one per call).
	TaskOnly bool
}

// Domain is a communication domain over some chips of a level-3 Worker.
type Domain struct {
	w            *Worker
	run          *Run
	spec         DomainSpec
	allocationID uint64
	offsets      []int        // buffer offsets from the window base
	ranks        []DomainRank // one per member, in rank order
	slot         *warmSlot    // the warm slot of a task_only domain (warm.go)

	life lifetime.Life // guarded by w.mu (engine/internal/lifetime)
}

// commRequest is what every rank of an allocation is given.
type commRequest = comm.Request

// DomainRank is one member's part of a domain, wherever its chip lives:
// its device CommContext and window in the chip's address space, and how
// to release it (once).
type DomainRank struct {
	DeviceCtx  uint64
	WindowBase uint64
	WindowSize int
	Release    func() error
	// RaceKey is the window's first byte as the race detector keys it
	// (race.Key), 0 if unknown.
	RaceKey uintptr
}

// LocalDomains are a level-3 Worker's communication domains over its own
// chips: the live ones by name, the allocation ids, the chips' base
// communicator (made once, at the first allocation; a global domain's
// ranks on this node need it too) and the warm slots of task_only domains.
//
// live, allocSeq and every domain's lifetime are guarded by the Worker's
// mu: a run's fence reads them in the section it takes anyway, and a lock
// of their own would add one to it. The warm slots' mu is a leaf lock,
// taken with nothing else held. No lock is held across a rank's
// allocation or release, nor while the base communicator is made.
type LocalDomains struct {
	w         *Worker
	live      map[string]*Domain // not yet released, by name (w.mu)
	allocSeq  uint64             // the last allocation id (w.mu)
	commOnce  sync.Once
	commErr   error
	commInits atomic.Int32 // base communicators made: 0 or 1
	warm      warmSlots    // (warm.go)
}

func newLocalDomains(w *Worker) LocalDomains {
	return LocalDomains{w: w, live: map[string]*Domain{}}
}

// LocalDomains are the worker's domains over its own chips.
func (w *Worker) LocalDomains() *LocalDomains { return &w.domains }

// allocateRank runs rank's part of an allocation on chip id: in this
// process, or in the chip's own process.
func (ld *LocalDomains) allocateRank(req commRequest, rank, id int) (DomainRank, error) {
	return ld.w.tree.chips[id].allocateRank(req, rank)
}

// CommTimeout bounds the subset barrier of a domain allocation.
var CommTimeout = 30 * time.Second

var workerSeq atomic.Uint64

// Name is the domain's label.
func (d *Domain) Name() string { return d.spec.Name }

// Workers are the member chips in rank order.
func (d *Domain) Workers() []int { return append([]int(nil), d.spec.Workers...) }

// AllocationID is unique within the Worker; it scopes shm names and
// barriers.
func (d *Domain) AllocationID() uint64 { return d.allocationID }

// Buffers returns the buffer specs with their offsets.
func (d *Domain) Buffers() ([]BufferSpec, []int) { return d.spec.Buffers, d.offsets }

// Released reports whether Release was called (or the domain was swept).
func (d *Domain) Released() bool {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	return d.life.Released()
}

// Freed reports whether the backend windows are gone.
func (d *Domain) Freed() bool {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	return d.life.Freed()
}

// RankView is one member's view of a domain: ChipDomainContext.
type RankView struct {
	Name        string
	Rank, Size  int
	DeviceCtx   uint64
	WindowBase  uint64
	WindowSize  int
	BufferPtrs  map[string]uint64
	BufferSpecs []BufferSpec
	Worker      int
}

// Rank returns the view of member chip `worker`: a RuntimeError after
// release, a KeyError for a non-member.
func (d *Domain) Rank(worker int) (*RankView, error) {
	if d.Released() {
		return nil, Errorf(RuntimeError, "domain %q was released; it cannot be indexed", d.spec.Name)
	}
	for r, id := range d.spec.Workers {
		if id != worker {
			continue
		}
		cr := d.ranks[r]
		v := &RankView{Name: d.spec.Name, Rank: r, Size: len(d.ranks), DeviceCtx: cr.DeviceCtx,
			WindowBase: cr.WindowBase, WindowSize: cr.WindowSize, BufferPtrs: map[string]uint64{},
			BufferSpecs: d.spec.Buffers, Worker: worker}
		for i, b := range d.spec.Buffers {
			v.BufferPtrs[b.Name] = cr.WindowBase + uint64(d.offsets[i])
		}
		return v, nil
	}
	return nil, Errorf(KeyError, "worker %d is not a member of domain %q (members: %s)", worker, d.spec.Name, FormatInts(d.spec.Workers))
}

// validate checks a spec before any backend work.
func (ld *LocalDomains) validate(spec *DomainSpec) ([]int, error) {
	const op = "allocate_domain"
	cfg := &ld.w.cfg
	if spec.Name == "" {
		return nil, Errorf(ValueError, "%s: name must not be empty", op)
	}
	if len(spec.Workers) == 0 {
		return nil, Errorf(ValueError, "%s: workers must not be empty", op)
	}
	seen := map[int]bool{}
	for _, id := range spec.Workers {
		if id < 0 || id >= len(cfg.DeviceIDs) {
			return nil, Errorf(ValueError, "%s: worker %d is not one of this worker's chips (0..%d)", op, id, len(cfg.DeviceIDs)-1)
		}
		if seen[id] {
			return nil, Errorf(ValueError, "%s: worker %d listed twice", op, id)
		}
		seen[id] = true
	}
	if err := CheckWindowSize(op, spec.WindowSize, cfg.Platform); err != nil {
		return nil, err
	}
	return BufferOffsets(op, spec.Buffers, spec.WindowSize)
}

// CheckWindowSize bounds a domain's window_size by a chip's device memory,
// before any backend work, so that a window no chip can hold is refused
// with the same error in every mode (it used to fail late, in the comm
// backend, with text that differed between modes).
func CheckWindowSize(op string, size int, platform hal.Platform) error {
	if size <= 0 {
		return Errorf(ValueError, "%s: window_size must be > 0, got %d", op, size)
	}
	if platform == nil {
		return nil
	}
	if limit := platform.Arch().DeviceMemory; int64(size) > limit {
		return Errorf(ValueError, "%s: window_size=%d exceeds the %d bytes of device memory of a %s chip", op, size, limit, platform.Name())
	}
	return nil
}

// BufferOffsets checks named buffers against a window and returns where
// each starts: carved in declaration order from the window base.
func BufferOffsets(op string, buffers []BufferSpec, windowSize int) ([]int, error) {
	names := map[string]bool{}
	offsets := make([]int, len(buffers))
	sum := 0
	for i, b := range buffers {
		if b.Name == "" {
			return nil, Errorf(ValueError, "%s: buffer %d has no name", op, i)
		}
		if names[b.Name] {
			return nil, Errorf(ValueError, "%s: buffer name %q used twice", op, b.Name)
		}
		names[b.Name] = true
		if b.NBytes <= 0 {
			return nil, Errorf(ValueError, "%s: buffer %q has nbytes=%d; it must be > 0", op, b.Name, b.NBytes)
		}
		// nbytes may pad past count elements, never fall short of them
		// (a view of count elements would run into the next buffer).
		if size := b.DType.Size(); b.Count < 0 || size > 0 && b.Count > b.NBytes/size {
			return nil, Errorf(ValueError, "%s: buffer %q has count=%d of %s, more than its nbytes=%d hold", op, b.Name, b.Count, b.DType, b.NBytes)
		}
		offsets[i] = sum
		sum += b.NBytes
	}
	if sum > windowSize {
		return nil, Errorf(ValueError, "%s: buffers sum to %d bytes, exceeds window_size=%d", op, sum, windowSize)
	}
	return offsets, nil
}

// AllocateDomain allocates a communication domain for this run. All
// validation happens before any backend work; the first allocation of a
// Worker initialises the base communicator of every chip.
func (o *Orchestrator) AllocateDomain(spec DomainSpec) (*Domain, error) {
	w := o.w
	if w.cfg.Level != 3 {
		return nil, Errorf(ValueError, "allocate_domain: domains are over a level-3 worker's chips (this worker is level %d)", w.cfg.Level)
	}
	spec.Workers = append([]int(nil), spec.Workers...)
	offsets, err := w.domains.validate(&spec)
	if err != nil {
		return nil, err
	}
	if !spec.TaskOnly {
		if err := o.direct("allocate_domain"); err != nil {
			return nil, err
		}
	}
	w.mu.Lock()
	if err := o.building("allocate_domain"); err != nil {
		w.mu.Unlock()
		return nil, err
	}
	if w.domains.live[spec.Name] != nil {
		w.mu.Unlock()
		return nil, Errorf(ValueError, "allocate_domain: a domain named %q is already live; release it first", spec.Name)
	}
	w.domains.allocSeq++
	d := &Domain{w: w, run: o.run, spec: spec, allocationID: w.domains.allocSeq, offsets: offsets}
	w.domains.live[spec.Name] = d // reserve the name while the backend works
	w.mu.Unlock()

	if err := w.domains.allocateRanks(d); err != nil {
		w.mu.Lock()
		delete(w.domains.live, spec.Name)
		w.mu.Unlock()
		return nil, err
	}
	w.race.nameDomain(d)
	w.mu.Lock()
	o.run.domains = append(o.run.domains, d)
	w.events.emit(Event{Kind: DomainAllocated, Run: o.run.id, Domain: d.spec.Name, AllocID: d.allocationID})
	w.mu.Unlock()
	return d, nil
}

// allocateRanks runs each rank's part of d's allocation; a task_only
// domain goes to a warm slot (warm.go).
func (ld *LocalDomains) allocateRanks(d *Domain) error {
	if err := ld.InitComm(); err != nil {
		return err
	}
	if err := fault.Hit("domain.alloc", -1); err != nil {
		return Wrap(err, "allocate_domain")
	}
	req := comm.Request{Namespace: ld.w.namespace, AllocationID: d.allocationID, Name: d.spec.Name,
		Ranks: len(d.spec.Workers), WindowSize: d.spec.WindowSize, Timeout: CommTimeout, Key: comm.NewKey()}
	if d.spec.TaskOnly {
		return ld.allocateWarm(d, req)
	}
	return ld.runRanks(d, req, false)
}

// runRanks runs each rank's part of req in parallel, as each chip would,
// and undoes the ranks that succeeded if any failed. Taking a warm slot
// back (reuse) meets no barrier, so in this process the ranks run one
// after another on this goroutine: a goroutine each would cost more than
// the work.
func (ld *LocalDomains) runRanks(d *Domain, req comm.Request, reuse bool) error {
	w := ld.w
	n := len(d.spec.Workers)
	d.ranks = make([]DomainRank, n)
	errs := make([]error, n)
	if reuse && w.tree.chipsHere {
		for r, id := range d.spec.Workers {
			if d.ranks[r], errs[r] = ld.allocateRank(req, r, id); errs[r] != nil {
				break
			}
		}
	} else {
		// Under --seed the ranks place their windows one after another
		// (each starts once the one before has mapped its own), so that
		// every window gets the same address in every replay.
		placed := make([]chan struct{}, n)
		var wg sync.WaitGroup
		for r, id := range d.spec.Workers {
			placed[r] = make(chan struct{})
			req := req
			if w.cfg.Det != nil {
				req.Placed = func() { close(placed[r]) }
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if w.cfg.Det != nil && r > 0 {
					<-placed[r-1]
				}
				d.ranks[r], errs[r] = ld.allocateRank(req, r, id)
			}()
		}
		wg.Wait()
	}
	// The error is the first rank's that is not a timeout: a rank that
	// failed outright makes its peers time out at the barrier, and its own
	// error is the one that says why.
	var first error
	for pass := 0; pass < 2 && first == nil; pass++ {
		for r, err := range errs {
			if err != nil && first == nil && (pass == 1 || KindOf(err) != TimeoutError) {
				first = Wrap(err, fmt.Sprintf("allocate_domain %q: rank %d (worker %d)", d.spec.Name, r, d.spec.Workers[r]))
			}
		}
	}
	if first != nil {
		for _, cr := range d.ranks {
			if cr.Release != nil {
				cr.Release()
			}
		}
		d.ranks = nil
	}
	return first
}

// InitComm initialises every chip's base communicator once per Worker, in
// parallel. A failure is kept and returned to later callers.
func (ld *LocalDomains) InitComm() error {
	w := ld.w
	ld.commOnce.Do(func() {
		errs := make([]error, len(w.tree.chips))
		var wg sync.WaitGroup
		for i, c := range w.tree.chips {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = initBaseComm(c.Memory().Platform(), w.cfg.CommProfile)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				ld.commErr = Wrap(err, fmt.Sprintf("base communicator of chip_worker %d", i))
				return
			}
		}
		ld.commInits.Add(1)
	})
	return ld.commErr
}

// Release marks the domain released at once. The backend free runs after
// the owning run's fence, or now if that run has already retired. A
// second caller waits for the first and gets the same result.
func (d *Domain) Release() error {
	w := d.w
	w.mu.Lock()
	d.markReleased()
	retired := d.run.retired
	w.mu.Unlock()
	if !retired {
		return nil
	}
	return d.free()
}

// markReleased is the first release's bookkeeping (w.mu held): the name
// leaves the live list, and the event says so once.
func (d *Domain) markReleased() {
	if d.life.Release() {
		delete(d.w.domains.live, d.spec.Name)
		d.w.events.emit(Event{Kind: DomainReleased, Run: d.run.id, Domain: d.spec.Name, AllocID: d.allocationID})
	}
}

// free runs the backend free exactly once (lifetime): concurrent and later
// callers wait for it and get its result. A local free cannot be run
// again, so a failed one poisons the Worker (the rule: lifetime).
func (d *Domain) free() error {
	w := d.w
	w.mu.Lock()
	d.markReleased() // a domain swept at the fence is released here
	a, run := d.life.Begin()
	w.mu.Unlock()
	if !run {
		return a.Wait()
	}
	w.race.forgetDomain(d)
	err := d.releaseRanks()
	if err == nil && d.slot != nil {
		w.domains.warm.put(d.slot) // every rank parked, or tore down and will say so when taken back
	}
	const retry = false // each rank's release ran all of its teardown
	if _, poison := lifetime.Outcome(err, retry); poison {
		w.Poison(err)
	}
	w.mu.Lock()
	d.life.End(a, err, retry)
	w.events.emit(Event{Kind: DomainFreed, Run: d.run.id, Domain: d.spec.Name, AllocID: d.allocationID, Err: err})
	w.mu.Unlock()
	return err
}

// releaseRanks releases every rank, each once, and returns the first
// failure; a rank that fails does not stop the others.
func (d *Domain) releaseRanks() error {
	err := fault.Hit("domain.release", -1)
	for _, cr := range d.ranks {
		if e := cr.Release(); e != nil && err == nil {
			err = e
		}
	}
	if err == nil {
		return nil // no message to word
	}
	return Wrap(err, fmt.Sprintf("freeing domain %q", d.spec.Name))
}

// freeAtFence runs at r's fence: domains released during the run are
// freed in release order, then those never released are swept, last
// allocated first.
func (ld *LocalDomains) freeAtFence(r *Run) error {
	w := ld.w
	w.mu.Lock()
	r.retired = true
	var released, live []*Domain
	for _, d := range r.domains {
		if !d.life.Released() {
			live = append(live, d)
		} else {
			released = append(released, d)
		}
	}
	w.mu.Unlock()
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, d := range released {
		keep(d.free())
	}
	for i := len(live) - 1; i >= 0; i-- {
		keep(live[i].free())
	}
	return first
}

// Live returns the domains not yet released, by name.
func (ld *LocalDomains) Live() map[string]*Domain {
	ld.w.mu.Lock()
	defer ld.w.mu.Unlock()
	m := make(map[string]*Domain, len(ld.live))
	for k, v := range ld.live {
		m[k] = v
	}
	return m
}

// initBaseComm is a chip's part of the base communicator: in simulation,
// a check that the chip's platform serves the Worker's profile. It runs
// once per chip per Worker, before the first domain.
func initBaseComm(p hal.Platform, profile string) error {
	return p.Serves(profile)
}

// FormatInts formats ids the way scripts write lists, [0, 2], for
// messages and names a user reads (Go's %v would print [0 2]).
func FormatInts(ids []int) string {
	b := []byte{'['}
	for i, id := range ids {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	return string(append(b, ']'))
}
