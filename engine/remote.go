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
	w.children = append(w.children, nil)
	w.remoteSpecs = append(w.remoteSpecs, &s)
	return len(w.children) - 1, nil
}

// RemoteDepth is how many tasks a remote node is sent before the first
// completes. The node runs them in order; keeping the next ones on the
// wire hides the round trip between tasks.
const RemoteDepth = 8

// IsRemote reports whether NEXT_LEVEL id is a remote node.
func (w *Worker) IsRemote(id int) bool {
	return id >= 0 && id < len(w.remoteSpecs) && w.remoteSpecs[id] != nil
}

// dialRemotes connects every remote node in parallel under the start-up
// deadline (through Config.Dial), starts every worker group beside them
// (through Config.StartGroup: its ranks dial in) and ships the registry.
// Caller holds w.regMu (not w.mu: this waits on the network).
func (w *Worker) dialRemotes() error {
	if len(w.remoteSpecs) == 0 {
		return nil
	}
	if err := w.canDial(); err != nil {
		return err
	}
	deadline := time.Now().Add(w.cfg.StartupTimeout)
	parent := w.ClusterID()
	w.remotes = make([]RemoteNode, len(w.remoteSpecs))
	errs := make([]error, len(w.remoteSpecs))
	var wg sync.WaitGroup
	for id, spec := range w.remoteSpecs {
		if spec == nil || w.groupOf(id) != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := DialRequest{Name: fmt.Sprintf("remote_worker %d", id), ID: id, Spec: *spec, Sources: w.cfg.Sources,
				Parent: parent, Timeout: w.cfg.SessionTimeout, Deadline: deadline, Events: w.events.emit}
			n, err := w.cfg.Dial(req)
			if err == nil { // a failed dial leaves nothing to close
				w.remotes[id] = n
			}
			errs[id] = err
		}()
	}
	w.startGroups(parent, deadline, errs, &wg)
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
func (w *Worker) canDial() error {
	if len(w.groups) > 0 && w.cfg.StartGroup == nil {
		return Errorf(RuntimeError, "init: worker group 0: this worker has no transport for worker groups (Config.StartGroup is nil; set it to remote.StartGroup of package simpler/engine/remote)")
	}
	if w.cfg.Dial != nil {
		return nil
	}
	for id, spec := range w.remoteSpecs {
		if spec != nil && w.groupOf(id) == nil {
			return Errorf(RuntimeError, "init: remote_worker %d: this worker has no transport for remote nodes (Config.Dial is nil; set it to remote.Dial of package simpler/engine/remote)", id)
		}
	}
	return nil
}

// RemoteNode is NEXT_LEVEL id's remote node from Init to close; nil for a
// local id, and before Init and after close. A role that commands remote
// nodes (remote buffers) reaches them here.
func (w *Worker) RemoteNode(id int) RemoteNode {
	w.mu.Lock()
	defer w.mu.Unlock()
	if id >= 0 && id < len(w.remotes) {
		return w.remotes[id]
	}
	return nil
}

// remoteCmdReply runs a command on remote node id and returns its reply.
func (w *Worker) remoteCmdReply(id int, c *wire.Control) (wire.ControlReply, error) {
	n := w.RemoteNode(id)
	if n == nil {
		return wire.ControlReply{}, Errorf(RuntimeError, "remote worker %d is gone", id)
	}
	return n.Control(c)
}
