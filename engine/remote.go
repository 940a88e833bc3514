package engine

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"simpler/internal/hostport"
	"simpler/internal/token"
	"simpler/wire"
)

// RemoteSpec describes a remote level-3 node served by a
// `simpler remote-l3-worker` daemon.
type RemoteSpec struct {
	Endpoint          string // host:port
	Platform          string
	DeviceIDs         []int
	NumSubWorkers     int
	CommProfile       string
	GlobalDeviceRanks []int
	Token             []byte // nil: the token the daemon wrote on this host (token.ForEndpoint)
}

// Sources is the code a remote node runs: the module bundle with its
// sources, since a remote host has no copy of the parent's files.
type Sources struct {
	Root    string
	Modules []wire.Module
}

// DefaultSessionTimeout bounds every remote command and health probe.
const DefaultSessionTimeout = 30 * time.Second

// validateEndpoint checks host:port with a numeric port (split as
// package net splits it, without importing net: engine/remote dials).
func validateEndpoint(ep string) error {
	host, port, err := hostport.Split(ep)
	if err != nil || host == "" {
		return Errorf(ValueError, "add_remote_worker: endpoint %q is not host:port", ep)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return Errorf(ValueError, "add_remote_worker: endpoint %q has a non-numeric or out-of-range port", ep)
	}
	return nil
}

// AddRemoteWorker attaches a remote level-3 node (level 4 and up, before
// Init) and returns its NEXT_LEVEL id, from the same counter as AddWorker.
func (w *Worker) AddRemoteWorker(spec RemoteSpec) (int, error) {
	if err := checkRemoteSpec(&spec); err != nil {
		return 0, err
	}
	if spec.Token != nil {
		if err := token.Check(spec.Token); err != nil {
			return 0, Wrap(err, "add_remote_worker")
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cfg.Level < 4 {
		return 0, Errorf(ValueError, "add_remote_worker: only a level-4 or higher worker takes remote nodes (this one is level %d)", w.cfg.Level)
	}
	if w.state != stateNew {
		return 0, Errorf(RuntimeError, "add_remote_worker: remote nodes are added before init()")
	}
	s := spec
	w.tree.children = append(w.tree.children, nil)
	w.tree.specs = append(w.tree.specs, &s)
	return len(w.tree.children) - 1, nil
}

// RemoteDepth is how many tasks a remote node is sent before the first
// completes. The node runs them in order; keeping the next ones on the
// wire hides the round trip between tasks.
const RemoteDepth = 8

// dialRemotes connects every remote node in parallel under the start-up
// deadline (through Config.Dial), starts every worker group beside them
// (through Config.StartGroup: its ranks dial in) and ships the registry.
// Caller holds w.regMu (not w.mu: this waits on the network).
func (t *tree) dialRemotes() error {
	w := t.w
	if len(t.specs) == 0 {
		return nil
	}
	if err := t.canDial(); err != nil {
		return err
	}
	deadline := time.Now().Add(w.cfg.StartupTimeout)
	parent := w.ClusterID()
	if t.nodes == nil {
		t.nodes = make([]nodeSlot, len(t.specs))
	}
	errs := make([]error, len(t.specs))
	var wg sync.WaitGroup
	for id, spec := range t.specs {
		if spec == nil || t.groupOf(id) != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("remote_worker %d", id)
			req := DialRequest{Name: name, ID: id, Spec: *spec, Sources: w.cfg.Sources,
				Parent: parent, Timeout: w.cfg.SessionTimeout, Deadline: deadline, Events: w.events.emit}
			n, err := w.cfg.Dial(req)
			if err == nil { // a failed dial leaves nothing to close
				t.nodes[id] = &remoteSlot{n: n, name: name}
			}
			errs[id] = err
		}()
	}
	t.startGroups(parent, deadline, errs, &wg)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	for _, h := range w.reg.byDigest {
		if err := w.reg.registerRemote(h.Callable); err != nil {
			return err
		}
	}
	return nil
}

// canDial refuses remote nodes on a worker that has no transport for
// them: engine does not speak TCP itself (engine/remote does).
func (t *tree) canDial() error {
	if len(t.groups) > 0 && t.w.cfg.StartGroup == nil {
		return Errorf(RuntimeError, "init: worker group 0: this worker has no transport for worker groups (Config.StartGroup is nil; set it to remote.StartGroup of package simpler/engine/remote)")
	}
	if t.w.cfg.Dial != nil {
		return nil
	}
	for id, spec := range t.specs {
		if spec != nil && t.groupOf(id) == nil {
			return Errorf(RuntimeError, "init: remote_worker %d: this worker has no transport for remote nodes (Config.Dial is nil; set it to remote.Dial of package simpler/engine/remote)", id)
		}
	}
	return nil
}
