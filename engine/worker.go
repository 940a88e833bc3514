// Package engine runs hierarchical task graphs. A Worker at level 2 is one
// chip, run synchronously. A Worker at level 3 owns chips and SUB workers
// (its NEXT_LEVEL and SUB pools); at level 4 and up its NEXT_LEVEL pool is
// child Workers. The level is a label: every level from 3 up runs the same
// code.
//
// A run is built by an orchestration function that submits tasks through an
// Orchestrator; dependencies come from tensor tags, keyed on the tensor's
// address within the run. The Scheduler state machine places ready tasks on
// endpoints; a failed task poisons its consumers; the run's fence is the
// moment its function has returned and every task has retired, after which
// its heap blocks and domains are cleaned up in a fixed order.
//
// The package knows nothing of Starlark: a Go program can embed it. It
// starts no process and opens no socket: the process transport is package
// engine/proc (Config.Spawn), the TCP transport package engine/remote
// (Config.Dial), and engine imports neither.
package engine

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"simpler/hal"
	"simpler/hal/comm"
	"simpler/hal/shm"
	"simpler/wire"
)

// Config describes a Worker.
type Config struct {
	Level         int // 2, 3, 4, 5 or 6
	Platform      hal.Platform
	DeviceIDs     []int // chips (level 2: exactly one; level 3: one or more; level 4+: none)
	NumSubWorkers int
	Mode          string // "thread" or "process"
	EnableSDMA    bool
	HeapRingSize  int // bytes of run heap; 0 means DefaultHeapRingSize
	TaskWindow    int // tasks in flight before submit waits; 0 means DefaultTaskWindow
	// Launcher says what child processes run in process mode (this
	// binary, serving the child's side).
	Launcher *Launcher
	// Spawn starts the child processes of process mode at Init: the
	// transport is package engine/proc's (proc.Spawner{}), which engine
	// does not import. Nil: a worker that needs processes is refused at
	// Init.
	Spawn Spawner
	// StartupTimeout bounds bringing the whole tree up; 0 means
	// DefaultStartupTimeout.
	StartupTimeout time.Duration
	// SessionTimeout bounds every command to a remote node and its health
	// probes; 0 means DefaultSessionTimeout.
	SessionTimeout time.Duration
	// TaskTimeout is every task's deadline unless its CallConfig sets one;
	// 0 means none.
	TaskTimeout time.Duration
	// ControlTimeout bounds every control round trip to a local child
	// process (registration, direct control, domain and global-domain
	// steps); 0 means DefaultControlTimeout.
	ControlTimeout time.Duration
	// HealthTimeout is how long a local child process may go without
	// answering a health probe while it runs a task before it is failed;
	// 0 means DefaultHealthTimeout.
	HealthTimeout time.Duration
	// CloseTimeout bounds Close: after it, running work is cancelled and
	// child processes are killed; 0 means DefaultCloseTimeout.
	CloseTimeout time.Duration
	// Sources is the code shipped to remote nodes.
	Sources *Sources
	// Dial connects the remote nodes (AddRemoteWorker) at Init: the
	// transport is package engine/remote's (remote.Dial), which engine
	// does not import. Nil: a worker with remote nodes is refused at Init.
	Dial Dialer
	// StartGroup starts the worker groups (AddWorkerGroup) at Init:
	// engine/remote's StartGroup. Nil: a worker with groups is refused.
	StartGroup GroupStarter
	// CommProfile is the level-3 node's communication profile ("" means
	// "sim"); GlobalDeviceRanks, if set, gives each chip its rank among
	// all devices of a global domain (one per device id, unique).
	CommProfile       string
	GlobalDeviceRanks []int
}

// Defaults for Config.
const (
	DefaultHeapRingSize   = 64 << 20
	DefaultTaskWindow     = 16384
	DefaultControlTimeout = 30 * time.Second
	DefaultHealthTimeout  = 10 * time.Second
	DefaultCloseTimeout   = 10 * time.Second
	DefaultStartupTimeout = 30 * time.Second
)

// StopGrace is how long a member asked to stop may take before it is
// forced: a child process is killed (engine/proc), a close stops waiting
// for an endpoint's goroutine.
const StopGrace = time.Second

type lifecycle uint8

const (
	stateNew      lifecycle = iota
	stateStarting           // Init is bringing the tree up, outside w.mu
	stateReady
	stateClosed
)

// Worker is a node of the worker tree.
type Worker struct {
	cfg Config

	// Lock order: regMu, then mu. regMu serialises what fans out to the
	// tree and may wait on it (Init, Register, Unregister, Close), so that
	// mu, which every submit and completion takes, is never held across a
	// child process's or a remote node's answer.
	regMu    sync.Mutex
	mu       sync.Mutex
	cond     *sync.Cond // signalled when tasks retire (back-pressure, drain)
	waiters  int        // goroutines waiting on cond
	state    lifecycle
	poisoned error // a cleanup that could not complete; refuses later work
	attached bool  // added to a parent; the parent drives its lifecycle

	chips    []hal.Chip
	children []*Worker
	// Process mode: the child process behind each chip and SUB worker
	// (Config.Spawn's).
	chipProcs []ChipProcess
	subProcs  []Process
	nodeProcs []NodeProcess // level 4 in process mode: each local level-3 child
	// Remote nodes share the NEXT_LEVEL ids with children: children[id]
	// is nil for a remote node, remoteSpecs[id] nil for a local one.
	remoteSpecs []*RemoteSpec
	remotes     []RemoteNode // nil for a local id
	// remoteFailed counts goroutines completing remote tasks that could
	// not be sent (see remoteEndpoint.Start).
	remoteFailed sync.WaitGroup
	groups       []*workerGroup             // add_worker_group's, in the order added (group.go)
	rbufs        map[*RemoteBuffer]struct{} // live handles, for close
	globals      map[uint64]*nodeGlobal     // level 3: global domains this node hosts ranks of
	gdomains     map[uint64]*GlobalDomain   // level 4+: global domains this worker brokered, live
	globalSeq    uint64
	gwarm        gwarmCache // level 4+: pooled window names of released global domains (gwarm.go)
	cluster      uint64     // this broker's cluster id (clusterID), drawn on first use
	next         []Endpoint // NEXT_LEVEL slots, by id
	subs         []Endpoint // SUB slots, by id
	epWG         *sync.WaitGroup
	sched        *Sched // the core's, kept for SetDepth and tests
	core         *core  // runs, DAG, window, scheduler: the decision logic (core.go)
	reg          registry
	heap         *heapRing
	runs         map[*Run]struct{}
	runSeq       uint64

	namespace string             // unique per Worker in this process; scopes comm names
	domains   map[string]*Domain // live (unreleased) domains by name
	allocSeq  uint64             // last allocation id
	commOnce  sync.Once          // the base communicator, made at the first allocation
	commErr   error
	commInits atomic.Int32
	warm      warmSlots // task_only domains' warm slots (warm.go)

	hostBufs    map[uint64]*HostBuffer       // by token
	hostBufSegs map[*shm.Segment]*HostBuffer // by the object behind it
	bufSeq      uint64

	observer Observer // nil: no events
	// deadlines are the timers of running members with a deadline.
	deadlines map[memberKey]*time.Timer
}

// NewWorker validates cfg and returns a Worker in state NEW.
func NewWorker(cfg Config) (*Worker, error) {
	if err := validate(&cfg); err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, runs: map[*Run]struct{}{}, domains: map[string]*Domain{},
		hostBufs:    map[uint64]*HostBuffer{},
		hostBufSegs: map[*shm.Segment]*HostBuffer{},
		rbufs:       map[*RemoteBuffer]struct{}{},
		globals:     map[uint64]*nodeGlobal{},
		gdomains:    map[uint64]*GlobalDomain{},
		deadlines:   map[memberKey]*time.Timer{},
		namespace:   fmt.Sprintf("w%d", workerSeq.Add(1))}
	w.cond = sync.NewCond(&w.mu)
	w.reg.byDigest = map[string]*Handle{}
	return w, nil
}

// checkGlobalRanks checks explicit global device ranks: none, or one per
// device, each >= 0 and unique.
func checkGlobalRanks(op string, ranks []int, devices int) error {
	if len(ranks) == 0 {
		return nil
	}
	if len(ranks) != devices {
		return Errorf(ValueError, "%s: %d global_device_ranks for %d device_ids", op, len(ranks), devices)
	}
	seen := map[int]bool{}
	for i, r := range ranks {
		if r < 0 || r > wire.MaxDeviceID {
			return Errorf(ValueError, "%s: global_device_ranks[%d] = %d is out of range (0..%d)", op, i, r, wire.MaxDeviceID)
		}
		if seen[r] {
			return Errorf(ValueError, "%s: global_device_ranks[%d] = %d is listed twice", op, i, r)
		}
		seen[r] = true
	}
	return nil
}

// checkRemoteSpec checks every argument of add_remote_worker where it is
// given, against the bounds the node's daemon applies when the node comes
// up at init(): a bad one is a ValueError naming the argument now, not a
// refusal by the daemon later (num_sub_workers=-1 used to reach it as a
// 64-bit wire value out of bounds). It defaults comm_profile to "sim".
func checkRemoteSpec(spec *RemoteSpec) error {
	const op = "add_remote_worker"
	if err := validateEndpoint(spec.Endpoint); err != nil {
		return err
	}
	if spec.Platform == "" {
		return Errorf(ValueError, "%s: platform is required", op)
	}
	p, err := hal.Lookup(spec.Platform)
	if err != nil {
		return Wrap(err, op+": platform")
	}
	if spec.CommProfile == "" {
		spec.CommProfile = hal.SimProfile
	}
	if err := p.Serves(spec.CommProfile); err != nil {
		return Wrap(err, op)
	}
	if err := checkRemoteDevices(op, spec.DeviceIDs, p); err != nil {
		return err
	}
	if spec.NumSubWorkers < 0 || spec.NumSubWorkers > wire.MaxSubWorkers {
		return Errorf(ValueError, "%s: num_sub_workers must be in 0..%d, got %d", op, wire.MaxSubWorkers, spec.NumSubWorkers)
	}
	return checkGlobalRanks(op, spec.GlobalDeviceRanks, len(spec.DeviceIDs))
}

// checkRemoteDevices checks a remote node's device_ids: at least one, at
// most wire.MaxDevices, each a chip of its platform (and within the wire's
// bound), none twice.
func checkRemoteDevices(op string, ids []int, p hal.Platform) error {
	if len(ids) == 0 {
		return Errorf(ValueError, "%s: device_ids must not be empty", op)
	}
	if len(ids) > wire.MaxDevices {
		return Errorf(ValueError, "%s: %d device_ids, more than %d", op, len(ids), wire.MaxDevices)
	}
	top := min(p.Arch().MaxChips-1, wire.MaxDeviceID)
	seen := map[int]bool{}
	for i, id := range ids {
		if id < 0 || id > top {
			return Errorf(ValueError, "%s: device_ids[%d] = %d is out of range for %s (0..%d)", op, i, id, p.Name(), top)
		}
		if seen[id] {
			return Errorf(ValueError, "%s: device_ids[%d] = %d is listed twice", op, i, id)
		}
		seen[id] = true
	}
	return nil
}

// defaultTimeouts fills the timeouts left 0 with their defaults.
func defaultTimeouts(cfg *Config) error {
	if cfg.TaskTimeout < 0 {
		return Errorf(ValueError, "Worker: task_timeout_s must be >= 0, got %v", cfg.TaskTimeout)
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&cfg.ControlTimeout, DefaultControlTimeout}, {&cfg.HealthTimeout, DefaultHealthTimeout}, {&cfg.CloseTimeout, DefaultCloseTimeout}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	return nil
}

func validate(cfg *Config) error {
	if cfg.Level < 2 || cfg.Level > 6 {
		return Errorf(ValueError, "Worker: level must be 2, 3, 4, 5 or 6, got %d", cfg.Level)
	}
	if cfg.Platform == nil {
		return Errorf(ValueError, "Worker: platform is required")
	}
	switch cfg.Mode {
	case "":
		cfg.Mode = "thread"
	case "thread":
	case "process":
		if cfg.Launcher == nil {
			return Errorf(ValueError, "Worker: mode=\"process\" needs a launcher to start child processes (run the script with the simpler binary)")
		}

	default:
		return Errorf(ValueError, "Worker: mode must be \"thread\" or \"process\", got %q", cfg.Mode)
	}
	if cfg.NumSubWorkers < 0 {
		return Errorf(ValueError, "Worker: num_sub_workers must be >= 0, got %d", cfg.NumSubWorkers)
	}
	switch {
	case cfg.Level == 2 && len(cfg.DeviceIDs) != 1:
		return Errorf(ValueError, "Worker: level 2 is one chip: give device_id (got %d device ids)", len(cfg.DeviceIDs))
	case cfg.Level == 2 && cfg.NumSubWorkers > 0:
		return Errorf(ValueError, "Worker: level 2 has no SUB workers (num_sub_workers=%d)", cfg.NumSubWorkers)
	case cfg.Level == 3 && len(cfg.DeviceIDs) == 0:
		return Errorf(ValueError, "Worker: level 3 needs at least one device id")
	case cfg.Level >= 4 && len(cfg.DeviceIDs) > 0:
		return Errorf(ValueError, "Worker: level %d composes child workers; device_ids belong to its level-3 children", cfg.Level)
	}
	max := cfg.Platform.Arch().MaxChips
	seen := map[int]bool{}
	for _, id := range cfg.DeviceIDs {
		if id < 0 || id >= max {
			return Errorf(ValueError, "Worker: device id %d out of range for %s (0..%d)", id, cfg.Platform.Name(), max-1)
		}
		if seen[id] {
			return Errorf(ValueError, "Worker: device id %d listed twice", id)
		}
		seen[id] = true
	}
	if err := checkGlobalRanks("Worker", cfg.GlobalDeviceRanks, len(cfg.DeviceIDs)); err != nil {
		return err
	}
	// A platform this host cannot run (an onboard one without its vendor
	// runtime) fails at init with that cause (API.md section 7); its comm
	// profile is not judged before, since that refusal would only be a
	// consequence of the same absence.
	if err := cfg.Platform.Check(); err == nil || cfg.Level >= 4 {
		if err := cfg.Platform.Serves(cfg.CommProfile); err != nil {
			return Wrap(err, "Worker")
		}
	}
	if cfg.EnableSDMA && !hal.SDMA(cfg.Platform) {
		return Errorf(ValueError, "Worker: enable_sdma is honoured only on a2a3 (platform %s has no SDMA engine)", cfg.Platform.Name())
	}
	if cfg.HeapRingSize < 0 {
		return Errorf(ValueError, "Worker: heap_ring_size must be > 0, got %d", cfg.HeapRingSize)
	}
	if cfg.HeapRingSize == 0 {
		cfg.HeapRingSize = DefaultHeapRingSize
	}
	if cfg.TaskWindow <= 0 {
		cfg.TaskWindow = DefaultTaskWindow
	}
	if err := defaultTimeouts(cfg); err != nil {
		return err
	}
	if cfg.StartupTimeout <= 0 {
		cfg.StartupTimeout = DefaultStartupTimeout
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	return nil
}

// Level is the worker's level.
func (w *Worker) Level() int { return w.cfg.Level }

// Config returns the worker's configuration (with defaults filled in).
func (w *Worker) Config() Config { return w.cfg }

// Children returns the NEXT_LEVEL child workers (level 4 and up).
func (w *Worker) Children() []*Worker { return w.children }

// Chip returns the chip of NEXT_LEVEL worker id at level 3 (or the chip at
// level 2, id 0).
func (w *Worker) Chip(id int) (hal.Chip, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.ready("chip"); err != nil {
		return nil, err
	}
	return w.chip("chip", id)
}

func (w *Worker) chip(op string, id int) (hal.Chip, error) {
	if w.cfg.Level >= 4 {
		return nil, Errorf(ValueError, "%s: a level-%d worker has no chips of its own; its children do", op, w.cfg.Level)
	}
	if id < 0 || id >= len(w.chips) {
		// An index into the worker's chips: upstream raises IndexError.
		return nil, Errorf(IndexError, "%s: worker_id %d out of range (this worker has chips 0..%d)", op, id, len(w.chips)-1)
	}
	return w.chips[id], nil
}

// nextCount is the size of the NEXT_LEVEL pool.
func (w *Worker) nextCount() int {
	if w.cfg.Level >= 4 {
		return len(w.children)
	}
	return len(w.cfg.DeviceIDs)
}

// NextCount is the number of NEXT_LEVEL workers.
func (w *Worker) NextCount() int { return w.nextCount() }

// SubCount is the number of SUB workers.
func (w *Worker) SubCount() int { return w.cfg.NumSubWorkers }

// Attached reports whether w is another worker's child: its parent
// brings it up and closes it.
func (w *Worker) Attached() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.attached
}

// AddWorker attaches a child worker (level 4 and up, before Init) and
// returns its NEXT_LEVEL id.
func (w *Worker) AddWorker(child *Worker) (int, error) {
	if child == w {
		return 0, Errorf(ValueError, "add_worker: a worker cannot be its own child")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cfg.Level < 4 {
		return 0, Errorf(ValueError, "add_worker: only a level-4 or higher worker takes child workers (this one is level %d)", w.cfg.Level)
	}
	if w.state != stateNew {
		return 0, Errorf(RuntimeError, "add_worker: children are added before init()")
	}
	child.mu.Lock()
	defer child.mu.Unlock()
	switch {
	case child.cfg.Level != w.cfg.Level-1:
		return 0, Errorf(ValueError, "add_worker: a level-%d worker takes level-%d children, got level %d", w.cfg.Level, w.cfg.Level-1, child.cfg.Level)
	case child.attached:
		return 0, Errorf(ValueError, "add_worker: this worker is already attached to a parent")
	case child.state != stateNew:
		return 0, Errorf(ValueError, "add_worker: the child was already init()ed; its parent brings it up")
	}
	child.attached = true
	w.children = append(w.children, child)
	w.remoteSpecs = append(w.remoteSpecs, nil)
	return len(w.children) - 1, nil
}

// Init brings the worker and its subtree up.
func (w *Worker) Init() error {
	w.mu.Lock()
	attached := w.attached
	w.mu.Unlock()
	if attached {
		return Errorf(RuntimeError, "init: this worker is a child; its parent brings it up")
	}
	return w.start()
}

// start brings the worker's tree up: it checks under w.mu, does the slow
// part (opening chips, starting processes, dialing nodes) under regMu
// alone, and commits under w.mu again.
func (w *Worker) start() error {
	w.regMu.Lock()
	defer w.regMu.Unlock()
	w.mu.Lock()
	if err := w.canStart(); err != nil {
		w.mu.Unlock()
		return err
	}
	w.state = stateStarting
	w.mu.Unlock()
	err := w.open()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.teardown()
		w.state = stateNew
		return err
	}
	w.sched = NewSched(w.nextCount(), w.cfg.NumSubWorkers)
	for id := range w.remotes {
		if w.IsRemote(id) {
			w.sched.SetDepth(id, RemoteDepth)
		}
	}
	w.heap = newHeapRing(w.cfg.HeapRingSize)
	w.core = newCore(w.sched, w.heap, w.cfg.TaskWindow, w.workerName)
	w.state = stateReady
	if w.cfg.Level >= 3 {
		w.startEndpoints()
	}
	return nil
}

// canStart refuses Init in a state other than NEW. Caller holds w.mu.
func (w *Worker) canStart() error {
	switch w.state {
	case stateStarting:
		return Errorf(RuntimeError, "init: the worker is already being initialised")
	case stateReady:
		return Errorf(RuntimeError, "init: worker is already initialised")
	case stateClosed:
		return Errorf(RuntimeError, "init: worker is closed")
	}
	if w.cfg.Level >= 4 && len(w.children) == 0 {
		return Errorf(ValueError, "init: a level-%d worker needs at least one child (add_worker)", w.cfg.Level)
	}
	return w.cfg.Platform.Check()
}

// open opens chips and brings children up; teardown undoes a partial open.
// A worker that needs child processes and has no Spawner is refused
// before anything starts.
func (w *Worker) open() error {
	if err := w.canSpawn(); err != nil {
		return err
	}
	if w.cfg.Mode == "process" && w.cfg.Level <= 3 {
		return w.startProcs()
	}
	// Level 4 in process mode runs each level-3 child as a process. Level
	// 5 and 6 compose their children in this process; each child's own
	// mode decides how its subtree runs.
	if w.cfg.Mode == "process" && w.cfg.Level == 4 {
		if err := w.startNodes(); err != nil {
			return err
		}
		return w.dialRemotes()
	}
	for _, id := range w.cfg.DeviceIDs {
		c, err := w.cfg.Platform.OpenChip(id)
		if err != nil {
			return err
		}
		w.chips = append(w.chips, c)
	}
	for i, child := range w.children {
		if child == nil {
			continue
		}
		if err := child.start(); err != nil {
			return Wrap(err, fmt.Sprintf("child_worker %d", i))
		}
	}
	return w.dialRemotes()
}

func (w *Worker) teardown() error {
	first := w.closeProcs()
	for _, c := range w.chips {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	w.chips = nil
	w.remoteFailed.Wait()
	for _, n := range w.remotes {
		if n != nil {
			n.Close()
		}
	}
	w.remotes = nil
	if err := w.closeGroups(); err != nil && first == nil { // their ranks ended with their sessions
		first = err
	}
	for _, child := range w.children {
		if child == nil {
			continue
		}
		if err := child.closeTree(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// usable refuses work after close or once the worker is poisoned.
func (w *Worker) usable(op string) error {
	if w.state == stateClosed {
		return Errorf(RuntimeError, "%s: worker is closed", op)
	}
	if w.poisoned != nil {
		return &Error{Kind: RuntimeError, Msg: fmt.Sprintf("%s: worker is unusable after a failed cleanup: %v", op, w.poisoned), Cause: w.poisoned}
	}
	return nil
}

// ready is usable plus initialised.
func (w *Worker) ready(op string) error {
	if err := w.usable(op); err != nil {
		return err
	}
	switch w.state {
	case stateNew:
		return Errorf(RuntimeError, "%s: worker is not initialised; call init() first", op)
	case stateStarting:
		return Errorf(RuntimeError, "%s: init() is still bringing the worker up", op)
	}
	return nil
}

// Poison makes the worker refuse further work, with cause attached. It is
// for cleanups that cannot complete (a domain free that failed, say).
func (w *Worker) Poison(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.poisoned == nil {
		w.poisoned = cause
	}
}

// Close drains every run, stops endpoints and children and frees chips and
// the heap. It is idempotent.
func (w *Worker) Close() error {
	w.mu.Lock()
	if w.attached && w.state != stateClosed {
		w.mu.Unlock()
		return Errorf(RuntimeError, "close: this worker is a child; its parent closes it")
	}
	w.mu.Unlock()
	return w.closeTree()
}

// drainRuns waits for runs to finish, up to the close timeout; the ones
// still running then are cancelled, and if they do not finish within a
// grace either, the child processes and remote sessions behind them are
// ended. It returns an error naming what had to be forced, or nil.
func (w *Worker) drainRuns(runs []*Run) error {
	deadline := time.Now().Add(w.cfg.CloseTimeout)
	var late []*Run
	for _, r := range runs {
		select {
		case <-r.done:
		case <-time.After(time.Until(deadline)):
			late = append(late, r)
		}
	}
	if len(late) == 0 {
		return nil
	}
	ids := make([]string, len(late))
	for i, r := range late {
		ids[i] = fmt.Sprint(r.id)
		r.Cancel()
	}
	what := fmt.Sprintf("close: run %s still running after close_timeout_s=%v: cancelled", strings.Join(ids, ", "), w.cfg.CloseTimeout)
	grace := time.After(3 * StopGrace)
	for _, r := range late {
		select {
		case <-r.done:
		case <-grace:
			w.killChildren()
			return Errorf(RuntimeError, "%s, and still running after that: its child processes and sessions were ended", what)
		}
	}
	return Errorf(RuntimeError, "%s", what)
}

// killChildren ends every child process and remote session at once, so
// that whatever waits on them returns.
func (w *Worker) killChildren() {
	for _, p := range w.procs() {
		p.Kill()
	}
	for id, n := range w.remotes {
		if n != nil {
			n.Fail(Errorf(RuntimeError, "%s: ended by close", w.workerName(NextLevel, id)))
		}
	}
	w.killGroups()
	for _, c := range w.children {
		if c != nil {
			c.killChildren()
		}
	}
}

func (w *Worker) closeTree() error {
	w.regMu.Lock()
	defer w.regMu.Unlock()
	w.mu.Lock()
	if w.state == stateClosed {
		w.mu.Unlock()
		return nil
	}
	runs := make([]*Run, 0, len(w.runs))
	for r := range w.runs {
		if r.building {
			w.mu.Unlock()
			return Errorf(RuntimeError, "close: run %d is still being built; close() cannot be called from inside an orchestration function", r.id)
		}
		runs = append(runs, r)
	}
	w.state = stateClosed // refuse new work while the runs drain
	w.mu.Unlock()
	forced := w.drainRuns(runs)
	gerr := w.closeGlobalDomains()
	w.CloseGlobals()
	// Endpoints report to w.mu as they stop: wait for them outside it.
	if !w.stopEndpointsWithin(StopGrace) && forced == nil {
		forced = Errorf(RuntimeError, "close: a kernel of this worker did not stop; its goroutine is abandoned")
	}
	werr := w.dropWarm() // before the chips close: parked ranks are mapped in them
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.teardown()
	if err == nil {
		err = gerr
	}
	if err == nil {
		err = werr
	}
	if forced != nil {
		err = forced // what had to be forced comes first: it says why the rest may be missing
	}
	if e := w.closeHostBuffers(); e != nil && err == nil {
		err = e
	}
	if w.commInits.Load() > 0 {
		if e := comm.DrainObjects(); e != nil && err == nil {
			err = e
		}
	}
	if w.heap != nil {
		if e := w.heap.close(); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// CancelRuns cancels every run of the worker (Run.Cancel): an interrupt
// ends the work in hand without waiting for it.
func (w *Worker) CancelRuns() {
	w.mu.Lock()
	runs := make([]*Run, 0, len(w.runs))
	for r := range w.runs {
		runs = append(runs, r)
	}
	w.mu.Unlock()
	for _, r := range runs {
		r.Cancel()
	}
}

// Kill ends every child process and remote session of the tree at once:
// the forced end of a second interrupt.
func (w *Worker) Kill() { w.killChildren() }
