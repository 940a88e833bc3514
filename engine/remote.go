package engine

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"simpler/internal/fault"
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
	parent := w.clusterID()
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

// node returns remote node id for op, refusing other ids.
func (w *Worker) node(op string, id int) (RemoteNode, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.ready(op); err != nil {
		return nil, err
	}
	if !w.IsRemote(id) {
		return nil, Errorf(ValueError, "%s: worker %d is not a remote node", op, id)
	}
	return w.remotes[id], nil
}

// RemoteMalloc allocates nbytes on remote node worker, outside any run.
func (w *Worker) RemoteMalloc(worker, nbytes int) (*RemoteBuffer, error) {
	return w.DirectIn(nil).RemoteMalloc(worker, nbytes)
}

func (w *Worker) remoteMalloc(op string, worker, nbytes int) (*RemoteBuffer, error) {
	n, err := w.node(op, worker)
	if err != nil {
		return nil, err
	}
	r, err := n.Control(&wire.Control{Cmd: wire.CmdMalloc, NBytes: uint64(nbytes)})
	if err != nil {
		return nil, Wrap(err, op)
	}
	h := &RemoteBuffer{Worker: worker, Owner: worker, BufferID: r.Buffer.ID, Gen: r.Buffer.Generation, NBytes: nbytes, Access: AccessRW}
	w.mu.Lock()
	w.rbufs[h] = struct{}{}
	w.mu.Unlock()
	return h, nil
}

// RemoteFree releases an owner handle; the physical free waits for every
// slot ref and import. Freeing again is a no-op.
func (w *Worker) RemoteFree(h *RemoteBuffer) error {
	if h.Imported() {
		return Errorf(ValueError, "remote_free: this is an imported handle; release it with remote_release_import")
	}
	return w.releaseRemote(h)
}

// RemoteReleaseImport releases an imported handle once its slot refs
// drain. Releasing again is a no-op.
func (w *Worker) RemoteReleaseImport(h *RemoteBuffer) error {
	if !h.Imported() {
		return Errorf(ValueError, "remote_release_import: this is an owner handle; free it with remote_free")
	}
	return w.releaseRemote(h)
}

func (w *Worker) releaseRemote(h *RemoteBuffer) error {
	w.mu.Lock()
	acts := release(h)
	w.mu.Unlock()
	return w.doRemote(acts)
}

// doRemote carries out the registry's physical actions. An owner free
// that fails leaves its handle live (failed), so remote_free can be tried
// again; everything else it did is forgotten.
func (w *Worker) doRemote(acts []RemoteAction) error {
	var first error
	errs := make([]error, len(acts))
	for i, a := range acts {
		switch {
		case a.Free != nil:
			if errs[i] = fault.Hit("remote.free", a.Free.Owner); errs[i] == nil {
				errs[i] = w.remoteCmd(a.Free.Owner, &wire.Control{Cmd: wire.CmdFree, Buffer: ref(a.Free)})
			}
		case a.ReleaseImport != nil:
			errs[i] = w.remoteCmd(a.ReleaseImport.Worker, &wire.Control{Cmd: wire.CmdReleaseImport, Buffer: wire.BufferRef{ID: a.ReleaseImport.ImportID, Generation: 1}})
		}
		if errs[i] != nil && first == nil {
			first = errs[i]
		}
	}
	w.mu.Lock()
	for i, a := range acts {
		if errs[i] != nil && failed(a) {
			continue // still live: it stays tracked
		}
		delete(w.rbufs, a.Free)
		delete(w.rbufs, a.ReleaseImport)
	}
	w.mu.Unlock()
	return first
}

func ref(h *RemoteBuffer) wire.BufferRef { return wire.BufferRef{ID: h.BufferID, Generation: h.Gen} }

func (w *Worker) remoteCmd(id int, c *wire.Control) error {
	_, err := w.remoteCmdReply(id, c)
	return err
}

// remoteCmdReply runs a command on remote node id and returns its reply.
func (w *Worker) remoteCmdReply(id int, c *wire.Control) (wire.ControlReply, error) {
	w.mu.Lock()
	var n RemoteNode
	if id < len(w.remotes) {
		n = w.remotes[id]
	}
	w.mu.Unlock()
	if n == nil {
		return wire.ControlReply{}, Errorf(RuntimeError, "remote worker %d is gone", id)
	}
	return n.Control(c)
}

// ownerHandle checks h for a bulk copy.
func ownerHandle(op string, h *RemoteBuffer, offset, n int) error {
	switch {
	case h.Released():
		return UsedAfterRelease(op, "the handle")
	case h.Imported():
		return Errorf(ValueError, "%s: takes an owner handle, not an imported one", op)
	}
	return checkRange(op, offset, n, h.NBytes)
}

// RemoteCopyTo copies src into the owner buffer at offset, outside any
// run.
func (w *Worker) RemoteCopyTo(h *RemoteBuffer, src []byte, offset int) error {
	return w.DirectIn(nil).RemoteCopyTo(h, src, offset)
}

func (w *Worker) remoteCopyTo(op string, h *RemoteBuffer, src []byte, offset int) error {
	node, err := w.node(op, h.Owner)
	if err != nil {
		return err
	}
	for done := 0; done < len(src); {
		n := min(len(src)-done, wire.MaxCopy)
		_, release, err := node.ControlData(&wire.Control{Cmd: wire.CmdCopyTo, Buffer: ref(h), Offset: uint64(offset + done)}, src[done:done+n], nil)
		release()
		if err != nil {
			return Wrap(err, op)
		}
		done += n
	}
	return nil
}

// RemoteCopyFrom copies the owner buffer at offset into dst, outside any
// run.
func (w *Worker) RemoteCopyFrom(h *RemoteBuffer, dst []byte, offset int) error {
	return w.DirectIn(nil).RemoteCopyFrom(h, dst, offset)
}

func (w *Worker) remoteCopyFrom(op string, h *RemoteBuffer, dst []byte, offset int) error {
	n, err := w.node(op, h.Owner)
	if err != nil {
		return err
	}
	for done := 0; done < len(dst); {
		k := min(len(dst)-done, wire.MaxCopy)
		sink := dst[done : done+k]
		r, release, err := n.ControlData(&wire.Control{Cmd: wire.CmdCopyFrom, Buffer: ref(h), Offset: uint64(offset + done), NBytes: uint64(k)}, nil, sink)
		if err == nil && len(r.Data) != k {
			err = Errorf(RuntimeError, "asked for %d bytes, got %d", k, len(r.Data))
		}
		if err == nil && &r.Data[0] != &sink[0] {
			copy(sink, r.Data)
		}
		release()
		if err != nil {
			return Wrap(err, op)
		}
		done += k
	}
	return nil
}

// WatchRemote copies owner buffer h at offset into dst without ordering it
// against runs. It is for Go tests and tools that watch a run from
// outside, such as a kernel's mark that it has started; scripts have no
// such call: theirs is remote_copy_from, ordered as direct.go says.
func (w *Worker) WatchRemote(h *RemoteBuffer, dst []byte, offset int) error {
	const op = "watch_remote"
	if err := ownerHandle(op, h, offset, len(dst)); err != nil {
		return err
	}
	return w.remoteCopyFrom(op, h, dst, offset)
}

// RemoteExport describes a range of an owner buffer for import on other
// nodes. Its token is opaque: no transport key reaches a script.
type RemoteExport struct {
	owner  *RemoteBuffer
	offset int
	nbytes int
	access Access
	token  []byte
}

// Owner is the exported owner handle; Offset, NBytes and Access the range.
func (e *RemoteExport) Owner() *RemoteBuffer { return e.owner }
func (e *RemoteExport) Range() (int, int)    { return e.offset, e.nbytes }
func (e *RemoteExport) Access() Access       { return e.access }

// RemoteExportRange exports [offset, offset+nbytes) of owner handle h,
// outside any run.
func (w *Worker) RemoteExportRange(h *RemoteBuffer, offset, nbytes int, access Access) (*RemoteExport, error) {
	return w.DirectIn(nil).RemoteExportRange(h, offset, nbytes, access)
}

func (w *Worker) remoteExport(op string, h *RemoteBuffer, offset, nbytes int, access Access) (*RemoteExport, error) {
	n, err := w.node(op, h.Owner)
	if err != nil {
		return nil, err
	}
	r, err := n.Control(&wire.Control{Cmd: wire.CmdExport, Buffer: ref(h), Offset: uint64(offset), NBytes: uint64(nbytes), Access: wire.Access(access)})
	if err != nil {
		return nil, Wrap(err, op)
	}
	return &RemoteExport{owner: h, offset: offset, nbytes: nbytes, access: access, token: r.Data}, nil
}

// RemoteImport makes an export usable on node worker, outside any run;
// access 0 means as exported.
func (w *Worker) RemoteImport(e *RemoteExport, worker int, access Access) (*RemoteBuffer, error) {
	return w.DirectIn(nil).RemoteImport(e, worker, access)
}

func (w *Worker) remoteImport(op string, e *RemoteExport, worker int, access Access) (*RemoteBuffer, error) {
	n, err := w.node(op, worker)
	if err != nil {
		return nil, err
	}
	if err := fault.Hit("remote.import", worker); err != nil {
		return nil, Wrap(err, op)
	}
	r, err := n.Control(&wire.Control{Cmd: wire.CmdImport, Token: e.token, Access: wire.Access(access)})
	if err != nil {
		return nil, Wrap(err, op)
	}
	h := &RemoteBuffer{Worker: worker, Owner: e.owner.Owner, BufferID: e.owner.BufferID, Gen: e.owner.Gen,
		ImportID: r.Buffer.ID, NBytes: e.nbytes, Offset: e.offset, Access: access}
	w.mu.Lock()
	importFrom(e.owner, h)
	w.rbufs[h] = struct{}{}
	w.mu.Unlock()
	return h, nil
}

// captureRemote takes a slot ref on every remote buffer t uses, before t
// can be dispatched. Caller holds w.mu.
func (r *Run) captureRemote(t *Task) {
	for m := range t.args {
		for _, ten := range t.args[m].Tensors {
			if ten.Remote != nil {
				capture(ten.Remote.Buf)
				r.captured = append(r.captured, ten.Remote.Buf)
			}
		}
	}
}

// dropCaptured releases the run's slot refs at its fence, first of the
// cleanups; a release or free deferred until now happens here.
func (w *Worker) dropCaptured(r *Run) error {
	w.mu.Lock()
	var acts []RemoteAction
	for _, b := range r.captured {
		acts = append(acts, drop(b)...)
	}
	r.captured = nil
	w.mu.Unlock()
	return w.doRemote(acts)
}
