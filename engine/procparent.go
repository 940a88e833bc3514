package engine

import (
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"simpler/hal"
	"simpler/hal/comm"
	"simpler/hal/shm"
	"simpler/internal/bounds"
	"simpler/internal/fault"
	"simpler/wire"
)

// Launcher says how to start a child process: the same binary, with a
// hidden subcommand that calls RunChild. Bundle is handed to the child's
// resolver (the binding's module bundle).
type Launcher struct {
	Path   string
	Args   []string // before the mailbox name
	Bundle []byte
	Env    []string  // added to this process's environment
	Stdout io.Writer // nil: this process's
	Stderr io.Writer
}

// DefaultStartupTimeout bounds bringing a worker's children up.
const DefaultStartupTimeout = 30 * time.Second

// proc is the parent's side of one child process. The process itself is
// its current incarnation: a child that had to be killed (a task that
// would not stop, a child that stopped answering) is started again in
// place, so its worker slot stays usable.
type proc struct {
	name    string        // e.g. "chip_worker 1 (device 1)"
	timeout time.Duration // bounds a control round trip (the Worker's ControlTimeout)
	launch  *Launcher
	init    wire.MailboxInit
	cur     atomic.Pointer[incarnation]
	lanes   [mboxLanes]sync.Mutex

	tmu     sync.Mutex
	sent    uint64 // tasks sent on the task lane
	running uint64 // the number of the task in progress (0: none)
	why     error  // why the parent killed the current incarnation (watchHealth)
	bg      sync.WaitGroup
}

// incarnation is one process of a proc.
type incarnation struct {
	cmd    *exec.Cmd
	mb     *mailbox
	exited chan struct{} // closed when the process has been reaped
	exit   error         // why it exited; valid after exited
}

// startProc starts a child and sends it its role: init, with the
// launcher's and this process's fields filled in here. The wait for its
// reply is bounded by deadline.
func startProc(l *Launcher, name string, init wire.MailboxInit, control time.Duration, deadline time.Time) (*proc, error) {
	init.Prefix, init.Path, init.Args, init.Bundle = shm.Prefix(), l.Path, l.Args, l.Bundle
	p := &proc{name: name, timeout: control, launch: l, init: init}
	if err := p.spawn(deadline); err != nil {
		return nil, err
	}
	return p, nil
}

// spawn starts a new incarnation and waits for its answer to init.
func (p *proc) spawn(deadline time.Time) error {
	mb, err := newMailbox()
	if err != nil {
		return err
	}
	l := p.launch
	cmd := exec.Command(l.Path, append(append([]string(nil), l.Args...), mb.seg.Name)...)
	cmd.Stdout, cmd.Stderr = orStd(l.Stdout, os.Stdout), orStd(l.Stderr, os.Stderr)
	cmd.Env = append(childEnviron(), l.Env...)
	if err := cmd.Start(); err != nil {
		mb.seg.Close()
		return Errorf(RuntimeError, "%s: cannot start a child process: %v", p.name, err)
	}
	in := &incarnation{cmd: cmd, mb: mb, exited: make(chan struct{})}
	go func() {
		in.exit = cmd.Wait()
		close(in.exited)
	}()
	p.cur.Store(in)
	_, err = p.call(laneControl, wire.Payload(&p.init), deadline)
	if err == nil && time.Now().After(deadline) {
		err = Errorf(TimeoutError, "late") // answered, but after the deadline it was given
	}
	if err != nil {
		p.abort() // it never took up its role in time: nothing to shut down politely
		if KindOf(err) == TimeoutError || time.Now().After(deadline) {
			return Errorf(TimeoutError, "%s: starting: no answer within the startup deadline", p.name)
		}
		return Wrap(err, p.name+": starting")
	}
	return nil
}

func orStd(w io.Writer, def *os.File) io.Writer {
	if w != nil {
		return w
	}
	return def
}

// alive reports why the child can no longer answer.
func (p *proc) alive() error { return p.cur.Load().alive(p.name) }

func (in *incarnation) alive(name string) error {
	select {
	case <-in.exited:
		why := "exited"
		if in.exit != nil {
			why = "exited: " + in.exit.Error()
		}
		return Errorf(RuntimeError, "%s: child process %d %s", name, in.cmd.Process.Pid, why)
	default:
		return nil
	}
}

// call sends one request on a lane and decodes the reply's status. A zero
// deadline waits as long as the child lives.
func (p *proc) call(laneID int, req []byte, deadline time.Time) (*wire.Decoder, error) {
	p.lanes[laneID].Lock()
	defer p.lanes[laneID].Unlock()
	in := p.cur.Load()
	alive := func() error { return in.alive(p.name) }
	if err := alive(); err != nil {
		return nil, err
	}
	resp, err := in.mb.lanes[laneID].call(req, deadline, alive)
	if err != nil {
		if KindOf(err) == TimeoutError {
			// The request may still be answered, later, into a lane the next
			// request uses: a child in that state is not used again.
			err = Errorf(TimeoutError, "%s: child process %d did not answer in time; it was killed", p.name, in.cmd.Process.Pid)
			in.cmd.Process.Kill()
		}
		return nil, err
	}
	return decodeReply(resp)
}

// control is call on the control lane, bounded by the Worker's control
// timeout.
func (p *proc) control(build func(e *wire.Encoder)) (*wire.Decoder, error) {
	return p.controlWithin(p.timeout, build)
}

// controlWithin is control with its own bound on the child's answer.
func (p *proc) controlWithin(d time.Duration, build func(e *wire.Encoder)) (*wire.Decoder, error) {
	var e wire.Encoder
	build(&e)
	return p.call(laneControl, e.Bytes(), time.Now().Add(d))
}

// close asks the child to shut down, reaps it (killing it if it does not
// go), and removes the mailbox.
func (p *proc) close() error {
	p.bg.Wait()
	in := p.cur.Load()
	select {
	case <-in.exited:
	default:
		p.call(laneControl, []byte{opShutdown}, time.Now().Add(2*time.Second))
		select {
		case <-in.exited:
		case <-time.After(5 * time.Second):
			in.cmd.Process.Kill()
			<-in.exited
		}
	}
	return in.mb.seg.Close()
}

// abort kills the child, reaps it and removes its mailbox.
func (p *proc) abort() {
	in := p.cur.Load()
	in.cmd.Process.Kill()
	<-in.exited
	in.mb.seg.Close()
}

// kill ends the child at once.
func (p *proc) kill() { p.cur.Load().cmd.Process.Kill() }

// register ships a callable to the child by module and name.
func (p *proc) register(c Callable) error {
	loc, ok := c.(Locatable)
	if !ok {
		return Errorf(ValueError, "%q cannot be sent to a child process: it has no module to load it from", c.Name())
	}
	r := wire.MailboxControl{Op: opRegister, Digest: c.Digest(), Module: loc.Module(), Name: c.Name()}
	_, err := p.control(r.Encode)
	return Wrap(err, p.name)
}

// childEnviron is this process's environment for a child, with only the
// fault points a child may fire itself (fault.Inherited).
func childEnviron() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, fault.Env+"=")
	})
	if spec := fault.Inherited(os.Getenv(fault.Env)); spec != "" {
		env = append(env, fault.Env+"="+spec)
	}
	return env
}

// stageChunk bounds the data of one staging command through the mailbox.
const stageChunk = mboxArea / 2

// global runs a global-domain command in a process-mode level-3 node, which
// serves it with the same code as a node in this process or a remote one.
// Staging copies larger than the mailbox go as several commands.
func (p *proc) global(c *wire.Control) (wire.ControlReply, error) {
	n := len(c.Data)
	if c.Cmd == wire.CmdStageFrom {
		var ok bool
		if n, ok = bounds.Int(c.NBytes, wire.MaxStage); !ok { // int(NBytes) may be negative
			return wire.ControlReply{}, Errorf(ValueError, "%s of %d bytes exceeds the bound %d", c.Cmd, c.NBytes, wire.MaxStage)
		}
	}
	if (c.Cmd == wire.CmdStageTo || c.Cmd == wire.CmdStageFrom) && n > stageChunk {
		whole := wire.ControlReply{Cmd: c.Cmd}
		for done := 0; done < n; done += stageChunk {
			part := *c
			k := min(stageChunk, n-done)
			part.Offset += uint64(done)
			if c.Cmd == wire.CmdStageTo {
				part.Data = c.Data[done : done+k]
			} else {
				part.NBytes = uint64(k)
			}
			r, err := p.global(&part)
			if err != nil {
				return r, err
			}
			whole.Data = append(whole.Data, r.Data...)
		}
		return whole, nil
	}
	r := wire.MailboxControl{Op: opGlobal, Global: *c}
	d, err := p.control(r.Encode)
	if err != nil {
		return wire.ControlReply{}, Wrap(err, p.name)
	}
	return wire.DecodeControlReply(d.Raw(d.Remaining())) // a copy: the reply area is reused
}

// run executes one task member in the child.
func (p *proc) run(op uint8, h *Handle, args *TaskArgs, cfg *CallConfig) error {
	c := DefaultCallConfig
	if cfg != nil {
		c = *cfg
	}
	m, err := mailboxTask(op, h.Digest(), args, c, locateRef)
	if err != nil {
		return err
	}
	_, err = p.call(laneTask, wire.Payload(m), time.Time{})
	return err
}

// procChip is a chip that lives in a child process: every operation is a
// control request.
type procChip struct {
	p        *proc
	id       int
	platform hal.Platform
}

var _ hal.Chip = (*procChip)(nil)

func (c *procChip) DeviceID() int          { return c.id }
func (c *procChip) Platform() hal.Platform { return c.platform }
func (c *procChip) Live() (int, int)       { return 0, 0 }
func (c *procChip) Close() error           { return nil } // the child closes its chip

func (c *procChip) Malloc(size int) (uint64, error) {
	r := wire.MailboxControl{Op: opMalloc, Size: size}
	d, err := c.p.control(r.Encode)
	if err != nil {
		return 0, err
	}
	reply, err := wire.DecodeAddrReply(d.Rest())
	return reply.Addr, err
}

func (c *procChip) Free(ptr uint64) error {
	r := wire.MailboxControl{Op: opFree, Ptr: ptr}
	_, err := c.p.control(r.Encode)
	return err
}

// Bytes checks the range in the child; the memory itself is not
// reachable from the parent, so it returns no bytes.
func (c *procChip) Bytes(ptr uint64, size int) ([]byte, error) {
	r := wire.MailboxControl{Op: opCheck, Ptr: ptr, Size: size}
	_, err := c.p.control(r.Encode)
	return nil, err
}

func (c *procChip) copy(op uint8, dev uint64, host []byte) error {
	ref, err := hostRefOf(host)
	if err != nil {
		return err
	}
	r := wire.MailboxControl{Op: op, Ptr: dev, Host: ref, Size: len(host)}
	_, err = c.p.control(r.Encode)
	return err
}

func (c *procChip) CopyIn(dst uint64, src []byte) error  { return c.copy(opCopyIn, dst, src) }
func (c *procChip) CopyOut(dst []byte, src uint64) error { return c.copy(opCopyOut, src, dst) }

var errParentSide = Errorf(RuntimeError, "windows are mapped by the chip's own process in process mode")

func (c *procChip) MapWindow(mem []byte, label string) (uint64, error) { return 0, errParentSide }
func (c *procChip) UnmapWindow(ptr uint64) error                       { return errParentSide }

// commAlloc runs one rank's part of a domain allocation in the child.
func (c *procChip) commAlloc(req commRequest, rank int) (domainRank, error) {
	// The child's own barrier timeout comes first, so its answer (which
	// ranks never arrived) is the error, not a bare "no answer".
	cr := wire.MailboxControl{Op: opCommAlloc, Comm: wire.CommAlloc{Namespace: req.Namespace, AllocationID: req.AllocationID,
		Name: req.Name, Ranks: req.Ranks, WindowSize: req.WindowSize, Timeout: req.Timeout, Rank: rank}}
	d, err := c.p.controlWithin(req.Timeout+5*time.Second, cr.Encode)
	if err != nil {
		return domainRank{}, err
	}
	reply, err := wire.DecodeCommAllocReply(d.Rest())
	if err != nil {
		return domainRank{}, err
	}
	r := domainRank{DeviceCtx: reply.DeviceCtx, WindowBase: reply.WindowBase, WindowSize: reply.WindowSize}
	release := wire.MailboxControl{Op: opCommRelease, Ptr: req.AllocationID}
	r.release = func() error {
		_, err := c.p.control(release.Encode)
		return err
	}
	return r, nil
}

// globalRank runs one step of a global-domain rank in the chip's process
// (child.globalRank) and returns the reply's result for the caller to
// read. IMPORT may wait for rank 0's header up to the request's timeout,
// so the child's own timeout answers first.
func (c *procChip) globalRank(g wire.GlobalRankReq) (*wire.Decoder, error) {
	wait := c.p.timeout
	if g.Step == grImport {
		wait = CommTimeout + 5*time.Second
	}
	r := wire.MailboxControl{Op: opGlobalRank, GlobalRank: g}
	return c.p.controlWithin(wait, r.Encode) // a dead or silent child's error names it; the child's own name the rank
}

// prepareGlobal is PREPARE of one rank in the chip's process: the
// descriptor it exports and the window's address in that chip.
func (c *procChip) prepareGlobal(req comm.GlobalRequest, rank int) (comm.Descriptor, uint64, error) {
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
func (c *procChip) importGlobal(key grankKey, table []comm.Descriptor) (uint64, error) {
	d, err := c.globalRank(wire.GlobalRankReq{Step: grImport, DomainID: key.id, Generation: key.gen, Rank: key.rank, Table: wireDescriptors(table)})
	if err != nil {
		return 0, err
	}
	reply, err := wire.DecodeAddrReply(d.Rest())
	return reply.Addr, err
}

// stepGlobal is a step with no result: COMMIT, INVALIDATE, RELEASE.
func (c *procChip) stepGlobal(step uint8, key grankKey) error {
	d, err := c.globalRank(wire.GlobalRankReq{Step: step, DomainID: key.id, Generation: key.gen, Rank: key.rank})
	if err != nil {
		return err
	}
	return d.Finish()
}
