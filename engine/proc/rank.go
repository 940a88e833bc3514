package proc

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"simpler/engine"
	"simpler/hal/comm"
	"simpler/hal/shm"
	"simpler/wire"
)

// grankKey names a global-domain rank hosted by a chip process.
type grankKey struct {
	id, gen uint64
	rank    int
}

// chipRank is a rank of a global domain whose chip is a process of its
// own (a level-3 node with mode="process"), an engine.NodeRank. Every
// step runs in that process (child.globalRank): the window must be
// mapped into the chip where the chip's memory is. The window is a shared-memory object, so
// the node maps it too, by the name its descriptor carries, and staging
// is a copy here rather than a trip through the chip's mailbox.
type chipRank struct {
	chip *chip
	key  grankKey
	pfx  string // the names' prefix, for cleaning up after a dead chip process
	base uint64 // the window in the chip's address space

	mu     sync.Mutex   // a release waits for a staging copy in progress
	window *shm.Segment // the same window, mapped here; nil once released
	ctx    uint64       // the CommContext in the chip, after IMPORT
}

// prepareChipRank is PREPARE of one rank in its chip's process. On
// failure nothing is left: not in the chip's process, and not the names a
// chip process that died in the middle of it made.
func prepareChipRank(c *chip, req comm.GlobalRequest, rank int) (*chipRank, comm.Descriptor, error) {
	r := &chipRank{chip: c, key: grankKey{req.DomainID, req.Generation, rank}, pfx: req.Prefix}
	desc, base, err := c.prepareGlobal(req, rank)
	if err == nil && !strings.HasPrefix(desc.Handle, req.Prefix) {
		err = engine.Errorf(engine.RuntimeError, "%s: PREPARE of rank %d returned the window %q, not one under %q", c.p.name, rank, desc.Handle, req.Prefix)
	}
	if err == nil {
		r.base = base
		r.window, err = shm.Open(desc.Handle, req.WindowSize)
	}
	if err != nil {
		if rerr := r.Release(); rerr != nil {
			_, msg, _ := engine.SplitKind(err.Error())
			err = &engine.Error{Kind: engine.KindOf(err), Msg: fmt.Sprintf("%s (undoing it: %v)", msg, rerr), Cause: err}
		}
		return nil, comm.Descriptor{}, err
	}
	return r, desc, nil
}

func (r *chipRank) Import(table []comm.Descriptor) error {
	ctx, err := r.chip.importGlobal(r.key, table)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	return nil
}

func (r *chipRank) Commit() error { return r.chip.stepGlobal(grCommit, r.key) }

// Invalidate hides the view in the chip before any window goes; a chip
// process that cannot be reached has no kernel left to hide it from.
func (r *chipRank) Invalidate() { r.chip.stepGlobal(grInvalidate, r.key) }

// Release unmaps the node's mapping of the window and releases the rank
// in the chip's process. If that process is gone, so are its mappings;
// only the names it made are left, and the node removes them.
func (r *chipRank) Release() error {
	r.mu.Lock()
	win := r.window
	r.window, r.ctx = nil, 0
	r.mu.Unlock()
	var unmapErr error
	if win != nil {
		unmapErr = win.Close()
	}
	err := r.chip.stepGlobal(grRelease, r.key)
	if err != nil && r.chip.p.alive() != nil {
		err = comm.RemoveGlobalRank(r.pfx, r.key.id, r.key.gen, r.key.rank)
	}
	if err == nil {
		err = unmapErr
	}
	return err
}

func (r *chipRank) DeviceCtx() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctx
}

func (r *chipRank) WindowBase() uint64 { return r.base }

// Stage copies n bytes into or out of the window at c.Offset, which the
// node checked lie inside it: a copy here, not a trip through the chip's
// mailbox.
func (r *chipRank) Stage(c wire.Control, reply *wire.ControlReply, n int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.window == nil {
		return engine.Errorf(engine.RuntimeError, "%s: rank %d of global domain %d was released on this node", c.Cmd, r.key.rank, r.key.id)
	}
	at := int(c.Offset)
	if c.Cmd == wire.CmdStageTo {
		copy(r.window.Mem[at:at+n], c.Data)
		return nil
	}
	reply.Data = slices.Clone(r.window.Mem[at : at+n])
	return nil
}
