package proc

import (
	"time"

	"simpler/engine"
	"simpler/hal"
	"simpler/hal/comm"
	"simpler/wire"
)

// chipProcess is the process of one chip (an engine.ChipProcess): the
// process, the chip as its Worker sees it, and the ranks of domains made
// in it.
type chipProcess struct {
	*process
	chip *chip
}

func (c *chipProcess) Memory() engine.ChipMemory { return c.chip }

func (c *chipProcess) AllocateRank(req comm.Request, rank int) (engine.DomainRank, error) {
	return c.chip.commAlloc(req, rank)
}

func (c *chipProcess) PrepareGlobalRank(req comm.GlobalRequest, rank int) (engine.NodeRank, comm.Descriptor, error) {
	r, d, err := prepareChipRank(c.chip, req, rank)
	if err != nil {
		return nil, d, err // not r: a nil *chipRank in the interface is not nil
	}
	return r, d, nil
}

// chip is the memory of a chip that lives in a child process, as its
// Worker reaches it (an engine.ChipMemory): every operation is a control
// request. The memory itself is not reachable from here, so it has no
// bytes to hand out and maps no windows: the chip's own process does.
type chip struct {
	p        *process
	id       int
	platform hal.Platform
}

var _ engine.ChipMemory = (*chip)(nil)

func (c *chip) DeviceID() int          { return c.id }
func (c *chip) Platform() hal.Platform { return c.platform }

func (c *chip) Malloc(size int) (uint64, error) {
	r := wire.MailboxControl{Op: opMalloc, Size: size}
	d, err := c.p.control(r.Encode)
	if err != nil {
		return 0, err
	}
	reply, err := wire.DecodeAddrReply(d.Rest())
	return reply.Addr, err
}

func (c *chip) Free(ptr uint64) error {
	r := wire.MailboxControl{Op: opFree, Ptr: ptr}
	_, err := c.p.control(r.Encode)
	return err
}

// Check checks the range in the child, where the memory is.
func (c *chip) Check(ptr uint64, size int) error {
	r := wire.MailboxControl{Op: opCheck, Ptr: ptr, Size: size}
	_, err := c.p.control(r.Encode)
	return err
}

func (c *chip) copy(op uint8, dev uint64, host []byte) error {
	ref, err := hostRefOf(host)
	if err != nil {
		return err
	}
	r := wire.MailboxControl{Op: op, Ptr: dev, Host: ref, Size: len(host)}
	_, err = c.p.control(r.Encode)
	return err
}

func (c *chip) CopyIn(dst uint64, src []byte) error  { return c.copy(opCopyIn, dst, src) }
func (c *chip) CopyOut(dst []byte, src uint64) error { return c.copy(opCopyOut, src, dst) }

// commAlloc runs one rank's part of a domain allocation in the child.
func (c *chip) commAlloc(req comm.Request, rank int) (engine.DomainRank, error) {
	// The child's own barrier timeout comes first, so its answer (which
	// ranks never arrived) is the error, not a bare "no answer".
	cr := wire.MailboxControl{Op: opCommAlloc, Comm: wire.CommAlloc{Namespace: req.Namespace, AllocationID: req.AllocationID,
		Name: req.Name, Ranks: req.Ranks, WindowSize: req.WindowSize, Timeout: req.Timeout, Rank: rank, Key: req.Key}}
	in := c.p.cur.Load() // the process the rank lives in
	d, err := c.p.controlWithin(req.Timeout+5*time.Second, cr.Encode)
	if err != nil {
		return engine.DomainRank{}, err
	}
	reply, err := wire.DecodeCommAllocReply(d.Rest())
	if err != nil {
		return engine.DomainRank{}, err
	}
	r := engine.DomainRank{DeviceCtx: reply.DeviceCtx, WindowBase: reply.WindowBase, WindowSize: reply.WindowSize, RaceKey: uintptr(reply.WindowKey)}
	release := wire.MailboxControl{Op: opCommRelease, Ptr: req.AllocationID}
	prefix := c.p.init.Prefix
	r.Release = func() error {
		if !in.gone() {
			_, err := c.p.control(release.Encode)
			if err == nil || !in.gone() {
				return err
			}
		}
		// Killed (a kernel that would not stop): its mapping went with
		// it, its window's name is left for this process to remove.
		return removeDomainRank(prefix, req, rank)
	}
	return r, nil
}

// globalRank runs one step of a global-domain rank in the chip's process
// (child.globalRank) and returns the reply's result for the caller to
// read. IMPORT may wait for rank 0's header up to the request's timeout,
// so the child's own timeout answers first.
func (c *chip) globalRank(g wire.GlobalRankReq) (*wire.Decoder, error) {
	wait := c.p.timeout
	if g.Step == grImport {
		wait = engine.CommTimeout + 5*time.Second
	}
	r := wire.MailboxControl{Op: opGlobalRank, GlobalRank: g}
	return c.p.controlWithin(wait, r.Encode) // a dead or silent child's error names it; the child's own name the rank
}

// prepareGlobal is PREPARE of one rank in the chip's process: the
// descriptor it exports and the window's address in that chip.
func (c *chip) prepareGlobal(req comm.GlobalRequest, rank int) (comm.Descriptor, uint64, error) {
	d, err := c.globalRank(wire.GlobalRankReq{Step: grPrepare, DomainID: req.DomainID, Generation: req.Generation, Rank: rank,
		Prefix: req.Prefix, Name: req.Name, Ranks: req.Ranks, WindowSize: req.WindowSize, Timeout: req.Timeout})
	if err != nil {
		return comm.Descriptor{}, 0, err
	}
	reply, err := wire.DecodeGlobalPrepareReply(d.Rest())
	if err != nil {
		return comm.Descriptor{}, 0, err
	}
	desc, err := comm.DecodeDescriptor(reply.Descriptor[:])
	return desc, reply.WindowBase, err
}

// importGlobal is IMPORT of one rank in the chip's process; it returns
// the rank's device CommContext there.
func (c *chip) importGlobal(key grankKey, table []comm.Descriptor) (uint64, error) {
	d, err := c.globalRank(wire.GlobalRankReq{Step: grImport, DomainID: key.id, Generation: key.gen, Rank: key.rank, Table: engine.WireDescriptors(table)})
	if err != nil {
		return 0, err
	}
	reply, err := wire.DecodeAddrReply(d.Rest())
	return reply.Addr, err
}

// stepGlobal is a step with no result: COMMIT, INVALIDATE, RELEASE.
func (c *chip) stepGlobal(step uint8, key grankKey) error {
	d, err := c.globalRank(wire.GlobalRankReq{Step: step, DomainID: key.id, Generation: key.gen, Rank: key.rank})
	if err != nil {
		return err
	}
	return d.Finish()
}
