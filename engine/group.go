package engine

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"simpler/hal"
	"simpler/internal/hostport"
	"simpler/internal/token"
	"simpler/kind"
	"simpler/wire"
)

// A worker group is add_worker_group's: ranks of remote level-3 nodes
// that an existing launcher (mpirun, srun, a Kubernetes Indexed Job)
// places, and that dial in to this worker instead of being dialled. The
// engine knows what the group is (its ranks' ids and specs) and when it
// starts and stops; Config.StartGroup, a GroupStarter, is the transport
// (package engine/remote's), which listens, starts the launcher and
// waits for every rank. Once up, each rank is a RemoteNode like one of
// add_remote_worker's.

// The launchers a group may name.
const (
	LauncherMPI   = "mpirun"
	LauncherSlurm = "srun"
	LauncherNone  = "none" // the ranks are started by something else and dial in
)

// GroupSpec is what add_worker_group asks for.
type GroupSpec struct {
	Ranks         int
	Launcher      string // LauncherMPI, LauncherSlurm or LauncherNone
	Platform      string
	DeviceIDs     []int // every rank's chips
	NumSubWorkers int
	CommProfile   string // the level-4 worker's ("" means "sim")
	Hosts         []string
	LauncherArgs  []string
	// GlobalDeviceRanks is empty, or one per chip of every rank, rank
	// after rank (Ranks × len(DeviceIDs)).
	GlobalDeviceRanks []int
	Listen            string // host:port the worker listens on for its ranks
	TokenFile         string // the token the ranks prove; "" on loopback: one is made
	Token             []byte // read from TokenFile by AddWorkerGroup
}

// GroupRequest is what a GroupStarter is given at Init.
type GroupRequest struct {
	Name     string // the group as errors name it ("worker group 0")
	Index    int    // its place among the worker's groups
	Spec     GroupSpec
	Ranks    []DialRequest // one per rank, in rank order (Spec.Endpoint is empty: the rank dials in)
	Deadline time.Time     // every rank must be up by then (startup_timeout_s)
}

// GroupStarter listens for a group's ranks, starts its launcher and
// returns once every rank is up, or fails with nothing left running:
// Config.StartGroup (engine/remote's StartGroup).
type GroupStarter func(req GroupRequest) (RemoteGroup, error)

// RemoteGroup is a started group: its nodes, and the launcher behind
// them.
type RemoteGroup interface {
	// Nodes are the ranks' nodes, in rank order.
	Nodes() []RemoteNode
	// Close waits, at most timeout, for the launcher to exit once the
	// nodes are closed (their ranks end with their sessions), and ends
	// it after that.
	Close(timeout time.Duration) error
	// Kill ends the launcher at once.
	Kill()
}

// workerGroup is a group as its Worker holds it.
type workerGroup struct {
	spec GroupSpec
	ids  []int       // NEXT_LEVEL ids, in rank order
	live RemoteGroup // from Init to teardown
}

// AddWorkerGroup adds spec.Ranks remote level-3 nodes that a launcher
// starts at Init (level 4 and up, before Init) and returns their
// NEXT_LEVEL ids, in rank order, from the same counter as AddWorker.
func (w *Worker) AddWorkerGroup(spec GroupSpec) ([]int, error) {
	w.mu.Lock()
	level, state, profile := w.cfg.Level, w.state, w.cfg.CommProfile
	w.mu.Unlock()
	const op = "add_worker_group"
	if level < 4 {
		return nil, Errorf(ValueError, "%s: only a level-4 or higher worker takes remote nodes (this one is level %d)", op, level)
	}
	if state != stateNew {
		return nil, Errorf(RuntimeError, "%s: remote nodes are added before init()", op)
	}
	if spec.CommProfile == "" {
		spec.CommProfile = profile
	}
	if err := checkGroupSpec(&spec); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != stateNew {
		return nil, Errorf(RuntimeError, "%s: remote nodes are added before init()", op)
	}
	g := &workerGroup{spec: spec}
	d := len(spec.DeviceIDs)
	for r := range spec.Ranks {
		rs := &RemoteSpec{Platform: spec.Platform, DeviceIDs: spec.DeviceIDs, NumSubWorkers: spec.NumSubWorkers,
			CommProfile: spec.CommProfile, Token: spec.Token}
		if len(spec.GlobalDeviceRanks) > 0 {
			rs.GlobalDeviceRanks = spec.GlobalDeviceRanks[r*d : (r+1)*d]
		}
		w.tree.children = append(w.tree.children, nil)
		w.tree.specs = append(w.tree.specs, rs)
		g.ids = append(g.ids, len(w.tree.children)-1)
	}
	w.tree.groups = append(w.tree.groups, g)
	return append([]int(nil), g.ids...), nil
}

// checkGroupSpec checks every argument of add_worker_group where it is
// given: a bad one is a ValueError naming it now, not a launcher's
// failure at init(). It reads the token file, and defaults the comm
// profile to "sim".
func checkGroupSpec(spec *GroupSpec) error {
	const op = "add_worker_group"
	if spec.Ranks < 1 || spec.Ranks > wire.MaxGroupRanks {
		return Errorf(ValueError, "%s: ranks must be in 1..%d, got %d", op, wire.MaxGroupRanks, spec.Ranks)
	}
	switch spec.Launcher {
	case LauncherMPI, LauncherSlurm, LauncherNone:
	default:
		return Errorf(ValueError, "%s: launcher must be %q, %q or %q, got %q", op, LauncherMPI, LauncherSlurm, LauncherNone, spec.Launcher)
	}
	if spec.CommProfile == "" {
		spec.CommProfile = hal.SimProfile
	}
	// Each rank's node, as add_remote_worker checks one.
	if err := checkNodeShape(op, spec.Platform, spec.CommProfile, spec.DeviceIDs, spec.NumSubWorkers); err != nil {
		return err
	}
	if n := spec.Ranks * len(spec.DeviceIDs); len(spec.GlobalDeviceRanks) != 0 && len(spec.GlobalDeviceRanks) != n {
		return Errorf(ValueError, "%s: %d global_device_ranks for %d ranks of %d device_ids (give one per chip of every rank, rank after rank: %d)",
			op, len(spec.GlobalDeviceRanks), spec.Ranks, len(spec.DeviceIDs), n)
	}
	if err := checkGlobalRanks(op, spec.GlobalDeviceRanks, len(spec.GlobalDeviceRanks)); err != nil {
		return err
	}
	if err := checkLauncherArgs(op, spec); err != nil {
		return err
	}
	return checkListen(op, spec)
}

// checkLauncherArgs checks hosts and launcher_args: strings without
// control characters, and only for a launcher that takes them.
func checkLauncherArgs(op string, spec *GroupSpec) error {
	if spec.Launcher == LauncherNone && (len(spec.Hosts) > 0 || len(spec.LauncherArgs) > 0) {
		return Errorf(ValueError, "%s: hosts and launcher_args are for a launcher; launcher=\"none\" starts nothing", op)
	}
	for i, h := range spec.Hosts {
		if h == "" || strings.ContainsAny(h, " ,\t\n") {
			return Errorf(ValueError, "%s: hosts[%d] = %q is not a host name (one host per entry, optionally host:slots)", op, i, h)
		}
	}
	for i, a := range spec.LauncherArgs {
		if strings.ContainsAny(a, "\x00\n") {
			return Errorf(ValueError, "%s: launcher_args[%d] = %q has a NUL or newline", op, i, a)
		}
	}
	return nil
}

// checkListen checks the address the worker listens on for its ranks and
// reads the token. Listening beyond this host takes a token file: the
// ranks prove it, and a token made here would not reach them.
func checkListen(op string, spec *GroupSpec) error {
	host, port, err := hostport.Split(spec.Listen)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
		return Errorf(ValueError, "%s: listen=%q is not host:port (port 0 picks a free one)", op, spec.Listen)
	}
	loopback := token.IsLoopback(host)
	if !loopback && spec.TokenFile == "" {
		return Errorf(ValueError, "%s: listen=%q is not a loopback address; a group that listens beyond this host needs token_file= (a file every rank can read, mode 0600, that its ranks prove)", op, spec.Listen)
	}
	if loopback {
		for i, h := range spec.Hosts {
			name, _, _ := strings.Cut(h, ":")
			if !token.IsLoopback(name) {
				return Errorf(ValueError, "%s: hosts[%d] = %q: a rank there could not reach listen=%q, a loopback address; listen on one the hosts reach, with token_file=", op, i, h, spec.Listen)
			}
		}
	}
	if spec.TokenFile == "" {
		return nil
	}
	abs, err := filepath.Abs(spec.TokenFile)
	if err != nil {
		return Errorf(ValueError, "%s: token_file=%q: %v", op, spec.TokenFile, err)
	}
	spec.TokenFile = abs
	tok, err := token.Read(abs)
	if err != nil { // a file that is missing is the argument's fault too
		return Errorf(ValueError, "%s: token_file: %s", op, kind.Message(err))
	}
	spec.Token = tok
	return nil
}

// groupOf is the group remote node id belongs to, if any.
func (t *tree) groupOf(id int) *workerGroup {
	for _, g := range t.groups {
		if id >= g.ids[0] && id <= g.ids[len(g.ids)-1] {
			return g
		}
	}
	return nil
}

// startGroups starts every group on a goroutine of its own (on wg),
// beside the dials: each group's error goes to errs at its first id; its
// ranks take their ids in t.nodes. Caller holds w.regMu.
func (t *tree) startGroups(parent uint64, deadline time.Time, errs []error, wg *sync.WaitGroup) {
	w := t.w
	for gi, g := range t.groups {
		req := GroupRequest{Name: fmt.Sprintf("worker group %d", gi), Index: gi, Spec: g.spec, Deadline: deadline}
		for r, id := range g.ids {
			req.Ranks = append(req.Ranks, DialRequest{Name: fmt.Sprintf("remote_worker %d (rank %d of worker group %d)", id, r, gi), ID: id,
				Spec: *t.specs[id], Sources: w.cfg.Sources, Parent: parent, Timeout: w.cfg.SessionTimeout, Deadline: deadline, Events: w.events.emit})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			live, err := w.cfg.StartGroup(req)
			if err != nil {
				errs[g.ids[0]] = err
				return
			}
			g.live = live
			for r, n := range live.Nodes() {
				id := g.ids[r]
				t.nodes[id] = &remoteSlot{n: n, name: fmt.Sprintf("remote_worker %d", id)}
			}
		}()
	}
}

// liveGroups are the started groups' launchers. Caller holds w.mu.
func (t *tree) liveGroups() []RemoteGroup {
	var live []RemoteGroup
	for _, g := range t.groups {
		if g.live != nil {
			live = append(live, g.live)
		}
	}
	return live
}
