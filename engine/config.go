package engine

// A Worker's configuration and its checks: everything NewWorker refuses
// before anything is allocated.

import (
	"fmt"
	"time"

	"simpler/hal"
	"simpler/internal/race"
	"simpler/wire"
)

// Config describes a Worker.
type Config struct {
	Level         int // 2, 3, 4, 5 or 6
	Platform      hal.Platform
	DeviceIDs     []int // chips (level 2: exactly one; level 3: any number, none for a SUB-only node; level 4+: none)
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
	// OrderHazards also orders write-after-read and write-after-write
	// between the tasks of a run: an OUTPUT or OUTPUT_EXISTING waits for
	// every earlier reader and writer of its bytes, an INOUT for every
	// earlier reader too. Off (upstream's rules), only reads wait: INPUT
	// and INOUT for every earlier writer of the bytes they read. It orders
	// the tasks this Worker submits; a child Worker has its own (a node
	// process gets it in its NodeConfig; a remote node keeps upstream's).
	OrderHazards bool
	// Served: this Worker serves a parent in another process (a remote
	// session's, a node process's). Its runs may wait on peers elsewhere
	// (a global domain's), so its run waits poll in the endpoints' places,
	// not in one of their own (spin.go).
	Served bool
	// Race is the data-race and deadlock detector (--race) the Worker
	// reports to (race.go); nil: off, at the cost of a nil check per hook.
	Race *race.Detector
	// Det is the deterministic schedule (--seed) the Worker's members and
	// waits run under (det.go); nil: the OS schedules them.
	Det *Det
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
	if spec.CommProfile == "" {
		spec.CommProfile = hal.SimProfile
	}
	if err := checkNodeShape(op, spec.Platform, spec.CommProfile, spec.DeviceIDs, spec.NumSubWorkers); err != nil {
		return err
	}
	return checkGlobalRanks(op, spec.GlobalDeviceRanks, len(spec.DeviceIDs))
}

// checkNodeShape checks what a remote node is asked to be — its platform,
// comm profile, devices and SUB workers — against the bounds its daemon
// applies (add_remote_worker, and every rank of a worker group).
func checkNodeShape(op, platform, profile string, devices []int, subs int) error {
	if platform == "" {
		return Errorf(ValueError, "%s: platform is required", op)
	}
	p, err := hal.Lookup(platform)
	if err != nil {
		return Wrap(err, op+": platform")
	}
	if err := p.Serves(profile); err != nil {
		return Wrap(err, op)
	}
	if err := checkRemoteDevices(op, devices, p); err != nil {
		return err
	}
	if subs < 0 || subs > wire.MaxSubWorkers {
		return Errorf(ValueError, "%s: num_sub_workers must be in 0..%d, got %d", op, wire.MaxSubWorkers, subs)
	}
	return nil
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

// idRange names the ids 0..n-1 after some, for an error, or says none
// when there are none: a level-3 worker may have no chips, a level-4 one
// no children.
func idRange(n int, some, none string) string {
	if n == 0 {
		return none
	}
	return fmt.Sprintf("%s 0..%d", some, n-1)
}

// Config returns the worker's configuration (with defaults filled in).
func (w *Worker) Config() Config { return w.cfg }
