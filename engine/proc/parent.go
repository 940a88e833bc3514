package proc

import (
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"simpler/engine"
	"simpler/hal/shm"
	"simpler/internal/bounds"
	"simpler/internal/fault"
	"simpler/internal/lockorder"
	"simpler/wire"
)

// process is the parent's side of one child process (an
// engine.Process). The process itself is its current incarnation: a
// child that had to be killed (a task that would not stop, a child that
// stopped answering) is started again in place, so its worker slot stays
// usable.
type process struct {
	name       string                   // e.g. "chip_worker 1 (device 1)"
	timeout    time.Duration            // bounds a control round trip (the Worker's ControlTimeout)
	health     time.Duration            // a running task's health probes (watchHealth)
	startup    time.Duration            // bounds a restart
	registered func() []engine.Callable // the Worker's callables now, sent again after a restart
	launch     *engine.Launcher
	init       wire.MailboxInit
	cur        atomic.Pointer[incarnation]
	lanes      [mboxLanes]sync.Mutex

	tmu     sync.Mutex
	sent    uint64 // tasks sent on the task lane
	running uint64 // the number of the task in progress (0: none)
	why     error  // why the parent killed the current incarnation (watchHealth)
	bg      sync.WaitGroup
}

// incarnation is one OS process of a process.
type incarnation struct {
	cmd    *exec.Cmd
	mb     *mailbox
	exited chan struct{} // closed when the process has been reaped
	exit   error         // why it exited; valid after exited
	killed atomic.Bool   // the parent killed it: not to be used even before it is reaped
}

// start starts the child req asks for and sends it its role: init, with
// the launcher's and this process's fields filled in here. The wait for
// its reply is bounded by the request's deadline; a bound the request
// leaves 0 is the engine's default (a health probe every 0 s would spin).
func start(req engine.SpawnRequest, init wire.MailboxInit) (*process, error) {
	l := req.Launcher
	if l == nil {
		return nil, engine.Errorf(engine.RuntimeError, "%s: no launcher to start a child process with (Config.Launcher is nil)", req.Name)
	}
	init.Prefix, init.Path, init.Args, init.Bundle = shm.Prefix(), l.Path, l.Args, l.Bundle
	p := &process{name: req.Name, timeout: orDefault(req.Control, engine.DefaultControlTimeout),
		health: orDefault(req.Health, engine.DefaultHealthTimeout), startup: orDefault(req.Startup, engine.DefaultStartupTimeout),
		registered: req.Registered, launch: l, init: init}
	if err := p.spawn(req.Deadline); err != nil {
		return nil, err
	}
	return p, nil
}

// spawn starts a new incarnation and waits for its answer to init.
func (p *process) spawn(deadline time.Time) error {
	mb, err := newMailbox()
	if err != nil {
		return err
	}
	l := p.launch
	cmd := exec.Command(l.Path, append(append([]string(nil), l.Args...), mb.seg.Name)...)
	cmd.Stdout, cmd.Stderr = orStd(l.Stdout, os.Stdout), orStd(l.Stderr, os.Stderr)
	prefix, err := shm.ChildEnv()
	if err != nil {
		mb.seg.Close()
		return engine.Errorf(engine.RuntimeError, "%s: %v", p.name, err)
	}
	cmd.Env = append(append(childEnviron(), l.Env...), prefix)
	if err := cmd.Start(); err != nil {
		mb.seg.Close()
		return engine.Errorf(engine.RuntimeError, "%s: cannot start a child process: %v", p.name, err)
	}
	in := &incarnation{cmd: cmd, mb: mb, exited: make(chan struct{})}
	go func() {
		in.exit = cmd.Wait()
		removePool(p.init.Prefix, cmd.Process.Pid) // a killed child could not (orphans.go)
		close(in.exited)
	}()
	p.cur.Store(in)
	_, err = p.call(laneControl, wire.Payload(&p.init), deadline)
	if err == nil && time.Now().After(deadline) {
		err = engine.Errorf(engine.TimeoutError, "late") // answered, but after the deadline it was given
	}
	if err != nil {
		p.abort() // it never took up its role in time: nothing to shut down politely
		if engine.KindOf(err) == engine.TimeoutError || time.Now().After(deadline) {
			return engine.Errorf(engine.TimeoutError, "%s: starting: no answer within the startup deadline", p.name)
		}
		return engine.Wrap(err, p.name+": starting")
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func orStd(w io.Writer, def *os.File) io.Writer {
	if w != nil {
		return w
	}
	return def
}

// alive reports why the child can no longer answer.
func (p *process) alive() error { return p.cur.Load().alive(p.name) }

func (in *incarnation) alive(name string) error {
	select {
	case <-in.exited:
		why := "exited"
		if in.exit != nil {
			why = "exited: " + in.exit.Error()
		}
		return engine.Errorf(engine.RuntimeError, "%s: child process %d %s", name, in.cmd.Process.Pid, why)
	default:
	}
	if in.killed.Load() {
		return engine.Errorf(engine.RuntimeError, "%s: child process %d was killed", name, in.cmd.Process.Pid)
	}
	return nil
}

// call sends one request on a lane and decodes the reply's status. A zero
// deadline waits as long as the child lives.
func (p *process) call(laneID int, req []byte, deadline time.Time) (*wire.Decoder, error) {
	lockorder.IO("a request to a child process")
	p.lanes[laneID].Lock()
	defer p.lanes[laneID].Unlock()
	in := p.cur.Load()
	alive := func() error { return in.alive(p.name) }
	if err := alive(); err != nil {
		return nil, err
	}
	resp, err := in.mb.lanes[laneID].call(req, deadline, alive)
	if err != nil {
		if engine.KindOf(err) == engine.TimeoutError {
			// The request may still be answered, later, into a lane the next
			// request uses: a child in that state is not used again.
			err = engine.Errorf(engine.TimeoutError, "%s: child process %d did not answer in time; it was killed", p.name, in.cmd.Process.Pid)
			in.kill()
		}
		return nil, err
	}
	return decodeReply(resp)
}

// control is call on the control lane, bounded by the Worker's control
// timeout.
func (p *process) control(build func(e *wire.Encoder)) (*wire.Decoder, error) {
	return p.controlWithin(p.timeout, build)
}

// controlWithin is control with its own bound on the child's answer.
func (p *process) controlWithin(d time.Duration, build func(e *wire.Encoder)) (*wire.Decoder, error) {
	var e wire.Encoder
	build(&e)
	return p.call(laneControl, e.Bytes(), time.Now().Add(d))
}

// Close asks the child to shut down, reaps it (killing it if it does not
// go), and removes the mailbox.
func (p *process) Close() error {
	p.bg.Wait()
	in := p.cur.Load()
	select {
	case <-in.exited:
	default:
		p.askRaces()
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
func (p *process) abort() {
	in := p.cur.Load()
	in.cmd.Process.Kill()
	<-in.exited
	in.mb.seg.Close()
}

// Kill ends the child at once and waits (bounded) until it is reaped.
func (p *process) Kill() { p.cur.Load().kill() }

// reapWithin bounds the wait for a killed child to be reaped. SIGKILL
// ends a stopped process too; only one stuck in the kernel takes longer.
const reapWithin = 5 * time.Second

// kill sends SIGKILL and waits until the process has been reaped, within
// reapWithin: a kill that returned at once would leave the incarnation
// looking alive for a moment, and the next task would be sent to it
// instead of to a new one, failing with its late "exited: signal:
// killed". Should the reap not come in time, alive reports the kill
// anyway.
func (in *incarnation) kill() {
	in.killed.Store(true)
	in.cmd.Process.Kill()
	t := time.NewTimer(reapWithin)
	defer t.Stop()
	select {
	case <-in.exited:
	case <-t.C:
	}
}

// Register ships a callable to the child by module and name.
func (p *process) Register(c engine.Callable) error {
	loc, ok := c.(engine.Locatable)
	if !ok {
		return engine.Errorf(engine.ValueError, "%q cannot be sent to a child process: it has no module to load it from", c.Name())
	}
	r := wire.MailboxControl{Op: opRegister, Digest: c.Digest(), Module: loc.Module(), Name: c.Name()}
	_, err := p.control(r.Encode)
	return engine.Wrap(err, p.name)
}

// childEnviron is this process's environment for a child, with only the
// fault points a child may fire itself (fault.Inherited). The shm prefix
// is set apart (spawn): a child creates its domains' objects under its
// parent's prefix and holds its lock, so it shares that prefix for all it
// creates, and nothing an inherited variable says can change that.
func childEnviron() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, fault.Env+"=") || strings.HasPrefix(kv, shm.PrefixEnv+"=")
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
func (p *process) global(c *wire.Control) (wire.ControlReply, error) {
	n := len(c.Data)
	if c.Cmd == wire.CmdStageFrom {
		var ok bool
		if n, ok = bounds.Int(c.NBytes, wire.MaxStage); !ok { // int(NBytes) may be negative
			return wire.ControlReply{}, engine.Errorf(engine.ValueError, "%s of %d bytes exceeds the bound %d", c.Cmd, c.NBytes, wire.MaxStage)
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
		return wire.ControlReply{}, engine.Wrap(err, p.name)
	}
	return wire.DecodeControlReply(d.Raw(d.Remaining())) // a copy: the reply area is reused
}

// runOps is the task op of each role.
var runOps = map[uint8]uint8{roleChip: opRunChip, roleSub: opRunSub, roleNode: opRunOrch}

// run executes one task member in the child, as its role runs tasks;
// with a race tag, the child records it for the race detector and the
// reply carries the log.
func (p *process) run(h *engine.Handle, args *engine.TaskArgs, cfg *engine.CallConfig, raceTag uintptr) ([]byte, error) {
	c := engine.DefaultCallConfig
	if cfg != nil {
		c = *cfg
	}
	m, err := mailboxTask(runOps[p.init.Role], h.Digest(), args, c, locateRef)
	if err != nil {
		return nil, err
	}
	m.RaceTag = uint64(raceTag)
	log, err := p.callTask(m, raceTag != 0)
	p.askRaces() // a node process's count after each of its tasks, under --race (race.go)
	return log, err
}

// callTask sends a task request and returns its outcome and, if record,
// the member's race log (also from a member that failed).
func (p *process) callTask(m *wire.MailboxTask, record bool) ([]byte, error) {
	d, err := p.call(laneTask, wire.Payload(m), time.Time{})
	if le, ok := err.(*loggedError); ok { // the member failed, after doing what its log says
		return le.log, le.err
	}
	if err != nil || !record {
		return nil, err
	}
	log := d.Blob(wire.MaxRaceLog)
	return log, d.Finish()
}
