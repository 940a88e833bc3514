package engine

import (
	"io"
	"sync"
	"time"

	"simpler/hal"
	"simpler/hal/comm"
)

// The process seam. With mode="process" every chip and SUB worker of a
// level-3 Worker, and every local level-3 node of a level-4 one, is a
// child process. Package engine/proc is that transport (the mailbox, the
// parent's side, the child's side); engine never imports it and starts no
// process itself: Config.Spawn, a Spawner, brings it in, as Config.Dial
// brings in engine/remote. What is not transport stays here: which
// processes a Worker has, when they start and stop, and the registry
// they are sent.

// Launcher says how to start a child process: the same binary, with a
// hidden subcommand that serves the child's side (engine/proc's
// RunChild). Bundle is handed to the child's resolver (the binding's
// module bundle).
type Launcher struct {
	Path   string
	Args   []string // before the mailbox name
	Bundle []byte
	Env    []string  // added to this process's environment
	Stdout io.Writer // nil: this process's
	Stderr io.Writer
}

// SpawnRequest is what a Spawner is given to start one child process.
type SpawnRequest struct {
	Name     string // the process as errors name it ("chip_worker 1 (device 1)")
	ID       int    // its id in its pool, which its chip or SUB context carries
	Launcher *Launcher
	Platform hal.Platform // a chip's platform
	Device   int          // a chip's device id
	Node     Config       // a level-3 node's configuration; its StartupTimeout is what the deadline leaves
	Control  time.Duration
	Health   time.Duration // how long the process may leave a health probe unanswered while it runs a task
	Startup  time.Duration // bounds starting the process again after a kill
	Deadline time.Time     // the start-up deadline
	// Registered lists the callables the Worker has registered now: a
	// process started again after a kill is sent them again. It takes the
	// Worker's lock, so it must be called with none of the process's held.
	Registered func() []Callable
}

// Spawner starts the child processes of a process-mode Worker:
// Config.Spawn (engine/proc's Spawner). Each call starts one process and
// returns once it has taken up its role, or with a TimeoutError at the
// request's deadline; on an error nothing is left to close.
type Spawner interface {
	SpawnChip(req SpawnRequest) (ChipProcess, error)
	SpawnSub(req SpawnRequest) (Process, error)
	SpawnNode(req SpawnRequest) (NodeProcess, error)
}

// Process is a child process as its Worker drives it. Its locks are leaf
// locks: none is held while it calls back into the Worker (Registered).
type Process interface {
	// Run runs one task member in the process and waits for its outcome.
	// cfg is a node's task configuration (nil: DefaultCallConfig). stop
	// (nil: nothing will ask) is how the endpoint asks the member to stop:
	// the process is asked, and killed if it has not stopped after
	// StopGrace. A process an earlier stop or a health probe had to kill
	// is started again first, in place.
	Run(h *Handle, args *TaskArgs, cfg *CallConfig, stop *Stopper) error
	// RunRecorded is Run for a chip's or a SUB worker's member under
	// --race: the process records the member's accesses and
	// synchronisation, its own memory keyed with tag (race.ChipTag), and
	// returns the log (race.DecodeLog).
	RunRecorded(h *Handle, args *TaskArgs, stop *Stopper, tag uintptr) ([]byte, error)
	// Register ships a callable by module and name (Locatable).
	Register(c Callable) error
	// Kill ends the process at once, so that whatever waits on it returns.
	Kill()
	// Close asks the process to shut down, reaps it (killing it if it does
	// not go) and removes what connected to it.
	Close() error
}

// ChipProcess is the process of one chip, where the chip's memory is.
type ChipProcess interface {
	Process
	// Memory is the chip's memory as the Worker reaches it: every call is
	// a request to the process.
	Memory() ChipMemory
	// AllocateRank runs one rank's part of a domain allocation in the
	// process.
	AllocateRank(req comm.Request, rank int) (DomainRank, error)
	// PrepareGlobalRank is PREPARE of one rank of a global domain hosted
	// on this chip: the window is made and mapped in the process. On an
	// error nothing of the rank is left.
	PrepareGlobalRank(req comm.GlobalRequest, rank int) (NodeRank, comm.Descriptor, error)
}

// NodeProcess is a level-3 node in a process of its own: Command runs a
// global-domain command there (Worker.Command, as every node does).
type NodeProcess interface {
	Process
	Node
}

// needsProcesses reports whether open starts child processes: the chips
// and SUB workers of a process-mode level 2 or 3, the local nodes of a
// process-mode level 4. (Levels 5 and 6 compose their children in this
// process; each child's own mode decides.)
func (t *tree) needsProcesses() bool {
	switch {
	case t.w.cfg.Mode != "process" || t.w.cfg.Level > 4:
		return false
	case t.w.cfg.Level == 4:
		for _, c := range t.children {
			if c != nil {
				return true
			}
		}
		return false
	}
	return true
}

// canSpawn refuses a worker that needs child processes and has no
// transport for them: engine does not start processes itself
// (engine/proc does).
func (t *tree) canSpawn() error {
	if t.w.cfg.Spawn != nil || !t.needsProcesses() {
		return nil
	}
	return Errorf(RuntimeError, "init: this mode=\"process\" worker has no transport for child processes (Config.Spawn is nil; set it to proc.Spawner{} of package simpler/engine/proc)")
}

// spawnRequest is the request for the process named name, id in its pool.
func (t *tree) spawnRequest(name string, id int, deadline time.Time) SpawnRequest {
	w := t.w
	return SpawnRequest{Name: name, ID: id, Launcher: w.cfg.Launcher, Platform: w.cfg.Platform, Control: w.cfg.ControlTimeout,
		Health: w.cfg.HealthTimeout, Startup: w.cfg.StartupTimeout, Deadline: deadline, Registered: t.callables}
}

// callables lists the callables registered on the Worker.
func (t *tree) callables() []Callable {
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	cs := make([]Callable, 0, len(w.reg.byDigest))
	for _, h := range w.reg.byDigest {
		cs = append(cs, h.Callable)
	}
	return cs
}

// startProcs brings up a child process per chip and per SUB worker, all
// under one deadline, and ships every registered callable to each. On a
// failure teardown stops the ones that started. Caller holds w.regMu (not
// w.mu: this waits on the children).
func (t *tree) startProcs() error {
	w := t.w
	deadline := time.Now().Add(w.cfg.StartupTimeout)
	n, ns := len(w.cfg.DeviceIDs), w.cfg.NumSubWorkers
	chips, subs := make([]chipSlot, n), make([]slot, ns)
	errs := make([]error, n+ns)
	var wg sync.WaitGroup
	for i := range n + ns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i >= n {
				p, err := w.cfg.Spawn.SpawnSub(t.spawnRequest(w.workerName(Sub, i-n), i-n, deadline))
				if err == nil { // a failed spawn leaves nothing to close
					subs[i-n] = &procSub{p}
				}
				errs[i] = err
				return
			}
			req := t.spawnRequest(w.workerName(NextLevel, i), i, deadline)
			req.Device = w.cfg.DeviceIDs[i]
			p, err := w.cfg.Spawn.SpawnChip(req)
			if err == nil {
				chips[i] = &procChip{p}
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	t.chips, t.subs = chips, subs
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return t.shipRegistry()
}

// startNodes brings up each local level-3 child as a process of its own,
// which brings its own chips and SUB workers up before it answers. One
// deadline covers the whole tree. Its SUB workers are of this process.
// Caller holds w.regMu.
func (t *tree) startNodes() error {
	w := t.w
	for range w.cfg.NumSubWorkers {
		t.subs = append(t.subs, hereSub{})
	}
	deadline := time.Now().Add(w.cfg.StartupTimeout)
	nodes := make([]nodeSlot, len(t.children))
	errs := make([]error, len(t.children))
	var wg sync.WaitGroup
	for i, child := range t.children {
		if child == nil {
			continue // a remote node
		}
		req := t.spawnRequest(w.workerName(NextLevel, i), i, deadline)
		req.Node = child.cfg
		req.Node.StartupTimeout = time.Until(deadline)
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := w.cfg.Spawn.SpawnNode(req)
			if err == nil {
				nodes[i] = &procNode{p, child}
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	t.nodes = nodes
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return t.shipRegistry()
}

// shipRegistry sends every registered callable to every child process.
func (t *tree) shipRegistry() error {
	for _, h := range t.w.reg.byDigest {
		for _, p := range t.procs() {
			if err := p.Register(h.Callable); err != nil {
				return err
			}
		}
	}
	return nil
}
