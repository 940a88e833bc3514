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
//
// Locks, in the order a goroutine may take them (lockRanks in worker.go;
// every -race and invariants build checks it, TestWorkerLockOrderIsChecked):
// a Worker's regMu (what fans out to the tree and waits on it: Init,
// Register, Unregister, Close), its epMu (endpoints handed work from
// timers and cancels, or stopped by close), its mu (the core, the runs,
// the heap: the task path), then leaf locks taken with nothing else
// acquired under them (raceMu, roleMu, an endpoint's, a Stopper's, the
// --seed scheduler's, a role's own). A parent's lock comes before its
// child's of the same rank. No lock is held across I/O to a child process
// or a remote node: the slow part of Init and Close runs under regMu
// alone, and a transport calls back into the Worker with none of its own
// locks held.
package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"simpler/engine/internal/core"
	"simpler/internal/lockorder"
)

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

// The ranks of a Worker's locks, in the order a goroutine may take them
// (internal/lockorder checks it in every -race and invariants build).
// Equal ranks nest from parent to child: a parent's regMu, then its
// child's, when the parent brings the child up.
var (
	rankReg       = lockorder.Rank{Order: 10, Name: "Worker.regMu"}
	rankEndpoints = lockorder.Rank{Order: 20, Name: "Worker.tree.epMu"}
	rankWorker    = lockorder.Rank{Order: 30, Name: "Worker.mu", NoIO: true}
	rankRoles     = lockorder.Rank{Order: 90, Name: "Worker.roleMu"}
)

// Worker is a node of the worker tree.
type Worker struct {
	cfg Config

	// The lock order (lockRanks; every -race test checks it): regMu, then
	// epMu, then mu, then the leaves. regMu serialises what fans out to
	// the tree and may wait on it (Init, Register, Unregister, Close), so
	// that mu, which every submit and completion takes, is never held
	// across a child process's or a remote node's answer.
	regMu   lockorder.Mutex
	mu      lockorder.Mutex
	cond    *sync.Cond // signalled when tasks retire (back-pressure, drain)
	waiters int        // goroutines waiting on cond
	// building counts the runs whose orchestration function is running.
	// An endpoint does not start polling for its next member while one is
	// (spin.go): the submitter needs the core more.
	building atomic.Int32
	state    lifecycle

	race     *raceHooks // --race's hooks (race.go); nil without the detector
	det      *detHooks  // --seed's hooks (det.go); nil without the schedule
	poisoned error      // a cleanup that could not complete; refuses later work
	attached bool       // added to a parent; the parent drives its lifecycle

	tree    tree       // the slots and their lifecycle (tree.go)
	cluster uint64     // this worker's cluster id (ClusterID), drawn on first use
	core    *core.Core // runs, DAG, window, scheduler: the decision logic (package core)
	reg     Registry   // (registry.go)
	heap    *runHeap
	runs    map[*Run]struct{}
	runSeq  uint64

	namespace string       // unique per Worker in this process; scopes comm names
	domains   LocalDomains // (domain.go)

	hostBufs HostBuffers // (hostbuf.go)

	events    Events        // the observer and its clock (event.go)
	deadlines deadlineTimer // the one timer of the members' deadlines (deadline.go)

	closeHooks [nClosePhases][]closeHook // roles' work at close (hooks.go)
	roleMu     lockorder.Mutex           // guards roles; a leaf
	roles      map[any]any               // roles' state, by key (Worker.Role)
}

// NewWorker validates cfg and returns a Worker in state NEW.
func NewWorker(cfg Config) (*Worker, error) {
	if err := validate(&cfg); err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, runs: map[*Run]struct{}{},
		namespace: fmt.Sprintf("w%d", workerSeq.Add(1))}
	w.regMu.Rank, w.tree.epMu.Rank, w.mu.Rank = rankReg, rankEndpoints, rankWorker
	w.roleMu.Rank = rankRoles
	w.cond = sync.NewCond(&w.mu)
	w.tree.w = w
	w.race = newRaceHooks(w, cfg.Race)
	w.det = newDetHooks(w, cfg.Det)
	w.hostBufs = newHostBuffers(w)
	w.domains = newLocalDomains(w)
	w.events.det = cfg.Det
	w.reg = Registry{w: w, byDigest: map[string]*Handle{}}
	w.deadlines = deadlineTimer{det: cfg.Det, epoch: time.Now(), fire: driver{w}.deadlinesDue}
	return w, nil
}

// Level is the worker's level.
func (w *Worker) Level() int { return w.cfg.Level }

// Children returns the NEXT_LEVEL child workers (level 4 and up).
func (w *Worker) Children() []*Worker { return w.tree.children }

// NextCount is the number of NEXT_LEVEL workers.
func (w *Worker) NextCount() int {
	if w.cfg.Level >= 4 {
		return len(w.tree.children)
	}
	return len(w.cfg.DeviceIDs)
}

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
	w.tree.children = append(w.tree.children, child)
	w.tree.specs = append(w.tree.specs, nil)
	return len(w.tree.children) - 1, nil
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
	if err := w.tree.open(); err != nil {
		w.tree.teardown() // not under w.mu: see teardown
		w.mu.Lock()
		w.state = stateNew
		w.mu.Unlock()
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.heap = newRunHeap(w.cfg.HeapRingSize)
	w.core = newCore(w)
	w.state = stateReady
	if w.cfg.Level >= 3 {
		w.tree.startEndpoints()
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
	if err := w.det.supported(); err != nil {
		return err
	}
	return w.cfg.Platform.Check()
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
