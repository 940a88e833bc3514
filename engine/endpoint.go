package engine

import (
	"runtime/debug"
	"sync"
	"time"

	"simpler/internal/hostid"
	"simpler/internal/race"
	"simpler/wire"
)

// Endpoint runs the assignments of one NEXT_LEVEL or SUB slot of a Worker:
// a chip, a child worker, a SUB worker, a remote node. The scheduler gives
// it an assignment only when it has room for one (one at a time, or up to
// its depth), so Start never blocks. Whatever the transport, an endpoint
// reports every assignment it was given exactly once, to the driver (driver.completed).
type Endpoint interface {
	Start(a Assignment)
	// Cancel asks the endpoint to stop a (its run was cancelled, it passed
	// its deadline, or a member of its group failed); the endpoint still
	// reports a, truthfully: ErrNotStarted if a never started, nil if it
	// ran to its end all the same, its error if it was stopped. It does
	// not wait.
	Cancel(a Assignment, reason string)
	// Stop ends the endpoint once nothing is in flight on it.
	Stop()
}

// loopEndpoint runs assignments one after another on a goroutine of its
// own: a thread-mode chip, child or SUB worker, or a process-mode one
// whose goroutine waits on the child process (Process.Run). Its channel
// holds at most one assignment, because the scheduler only assigns to an
// idle endpoint.
type loopEndpoint struct {
	w     *Worker
	ch    chan Assignment
	run   func(e *loopEndpoint, a Assignment) error
	local any // the binding's per-endpoint state (a Starlark thread)
	// inProc: what it runs runs on this goroutine (thread mode), so the
	// race detector sees it as a context of its own (raceCtx, while it
	// runs). recorded: a chip's or SUB worker's process runs it and
	// records it for the detector (raceLog); a node's process checks
	// what it runs itself.
	inProc, recorded bool
	raceCtx          *race.Ctx
	raceLog          []byte
	chip             ChipCtx // reused by every kernel this endpoint runs
	out              []Assignment
	wg               *sync.WaitGroup
	spin             bool // poll for the next member before blocking (thread mode: spin.go)

	// stop asks what runs now to stop: the runner registers how with
	// stop.OnStop (a kernel's interpreter, a child's run, a child
	// process's task). It also keeps which member runs (Stopper.begin).
	stop Stopper
}

func (e *loopEndpoint) Start(a Assignment) { e.ch <- a }

func (e *loopEndpoint) Stop() { close(e.ch) }

// next waits for the next member. In thread mode, between runs, it polls
// first: the next run's member often follows at once (spin.go). While an
// orchestration function is submitting it does not: members come as fast
// as the submitter makes them, and a poller takes the core it needs
// (polling then cost back-to-back dispatch 15%). In process mode it does
// not either: the member runs in a child process that needs the core, and
// the mailbox already spins (polling here made a no-op task 2-5 times
// slower on two cores).
func (e *loopEndpoint) next() (Assignment, bool) {
	if e.spin && e.w.building.Load() == 0 {
		return spinRecv(e.ch)
	}
	a, ok := <-e.ch
	return a, ok
}

func (e *loopEndpoint) Cancel(a Assignment, reason string) {
	e.stop.stopMember(memberKey{a.Task, a.Member}, reason)
}

func (e *loopEndpoint) loop() {
	defer e.wg.Done()
	for {
		a, ok := e.next()
		if !ok {
			return
		}
		proc := e.w.det.start(a)
		err := ErrNotStarted // stopped before it started: nothing of it ran
		var rc *race.Ctx
		if e.stop.begin(memberKey{a.Task, a.Member}) {
			driver{e.w}.started(a)
			switch {
			case e.inProc:
				rc = e.w.race.start(a)
			case e.recorded:
				rc = e.w.race.startRecorded(a)
			}
			e.raceCtx = rc
			err = e.runSafely(a)
			if !e.recorded {
				e.w.race.finish(a, rc)
			}
		}
		if e.recorded {
			e.w.race.replay(a, rc, e.raceLog)
			e.raceLog = nil
		}
		after := driver{e.w}.completed(a, err, &e.out)
		if after != nil {
			after()
		}
		if rc != nil {
			rc.Exit()
			e.raceCtx = nil
		} else {
			e.w.race.queue(-1)
		}
		if proc != nil {
			proc.Exit()
		}
	}
}

// runSafely runs a, turning a panic into the task's failure.
func (e *loopEndpoint) runSafely(a Assignment) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = Errorf(RuntimeError, "panic: %v\n%s", p, debug.Stack())
		}
	}()
	return e.run(e, a)
}

// RemoteNode is a remote level-3 node as its parent drives it: tasks
// sent ahead up to RemoteDepth, an ordered command lane, registration and
// its health. Package engine/remote implements it over TCP; engine never
// imports that package (Config.Dial brings it in). Its locks are leaf
// locks: none is held while it calls done.
type RemoteNode interface {
	// Start sends a task member, named by key (comparable) for Cancel.
	// done gets its outcome exactly once, on a goroutine that must not
	// wait for another reply from the node; work that might is returned
	// as after, which runs where it may block. An error means nothing was
	// sent and done will not be called.
	Start(key any, h *Handle, args *TaskArgs, cfg *CallConfig, done func(error) (after func())) error
	// Cancel asks the node to stop member key, and retires the node if it
	// does not stop in time. It does not wait.
	Cancel(key any, reason string)
	// Control runs one command on the ordered lane.
	Control(c *wire.Control) (wire.ControlReply, error)
	// ControlData runs a command with bulk data after it (a COPY_TO) or a
	// sink its reply's data is read into (a COPY_FROM); the reply's data is
	// valid until release is called, which the caller must do.
	ControlData(c *wire.Control, bulk, sink []byte) (r wire.ControlReply, release func(), err error)
	// Register ships a callable by module and name.
	Register(c Callable) error
	// Lost is why the node takes no more work (nil while it is usable).
	Lost() error
	// Fail retires the node with err: its tasks in flight fail with it.
	Fail(err error)
	// Host is the host the node runs on, as it said when it came up.
	Host() hostid.ID
	// Close ends the session and waits for what serves it.
	Close()
}

// DialRequest is what a Dialer is given to bring up one remote node.
type DialRequest struct {
	Name     string // the node as errors name it ("remote_worker 1")
	ID       int    // its NEXT_LEVEL id, which its frames carry
	Spec     RemoteSpec
	Sources  *Sources      // the code the node runs
	Parent   uint64        // the level-4 worker's id: the node's exports are bound to it
	Timeout  time.Duration // bounds every command and health probe
	Deadline time.Time     // the start-up deadline
	Events   func(Event)   // reports what the node did (RemoteSpan, RemoteCopy) to the Worker's observer; nil: nothing
}

// Dialer connects a remote node, proves the token, brings the node up and
// ships it the code: Config.Dial (engine/remote's Dial).
type Dialer func(req DialRequest) (RemoteNode, error)

// remoteEndpoint sends assignments to a remote node, up to its depth at
// once; the node's reader reports them. Work that may need the node again
// (finishing a fenced run) is not done on that reader.
type remoteEndpoint struct {
	w *Worker
	n RemoteNode

	// stops is the members asked to stop (Cancel) that have not completed,
	// with why: a stop can come before the member's Start (its sibling in
	// a group failed first), when the node does not know it yet.
	mu    sync.Mutex
	stops map[memberKey]string
}

func (e *remoteEndpoint) Start(a Assignment) {
	driver{e.w}.started(a)
	t := taskOf(a.Task)
	k := memberKey{a.Task, a.Member}
	if _, stopped := e.stop(k); stopped { // asked to stop before it started: it never runs
		e.completeOff(a, ErrNotStarted)
		return
	}
	err := e.n.Start(k, t.handle, &t.args[a.Member], &t.cfg, func(err error) func() {
		defer e.w.race.queue(-1)
		e.forget(k)
		return driver{e.w}.completed(a, err, nil)
	})
	if err != nil { // not sent: report it off this goroutine, which may hold a caller's state
		e.completeOff(a, err)
		return
	}
	if reason, stopped := e.stop(k); stopped { // the stop came while it was being sent
		e.n.Cancel(k, reason)
	}
}

// completeOff reports a member that never reached the node, off this
// goroutine, which may hold a caller's state.
func (e *remoteEndpoint) completeOff(a Assignment, err error) {
	e.forget(memberKey{a.Task, a.Member})
	e.w.tree.remoteFailed.Add(1)
	go func() {
		defer e.w.tree.remoteFailed.Done()
		defer e.w.race.queue(-1)
		after := driver{e.w}.completed(a, err, nil)
		if after != nil {
			after()
		}
	}()
}

// stop reports whether k was asked to stop, and why.
func (e *remoteEndpoint) stop(k memberKey) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	reason, ok := e.stops[k]
	return reason, ok
}

func (e *remoteEndpoint) forget(k memberKey) {
	e.mu.Lock()
	delete(e.stops, k)
	e.mu.Unlock()
}

func (e *remoteEndpoint) Stop() {}

func (e *remoteEndpoint) Cancel(a Assignment, reason string) {
	k := memberKey{a.Task, a.Member}
	e.mu.Lock()
	if e.stops == nil {
		e.stops = map[memberKey]string{}
	}
	e.stops[k] = reason
	e.mu.Unlock()
	e.n.Cancel(k, reason) // nothing if the node does not know k yet: Start sees the stop
}

// stopEndpointsWithin ends the endpoints and waits for their goroutines,
// at most d; it reports whether they all ended. (A kernel that neither
// returns nor heeds a stop, a Go kernel in a loop, keeps its goroutine.)
func (t *tree) stopEndpointsWithin(d time.Duration) bool {
	t.epMu.Lock()
	for _, ep := range t.nextEP {
		ep.Stop()
	}
	for _, ep := range t.subEP {
		ep.Stop()
	}
	t.nextEP, t.subEP = nil, nil
	t.epStopped = true
	t.epMu.Unlock()
	if t.epWG == nil {
		return true
	}
	done := make(chan struct{})
	go func() {
		t.epWG.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// Node is a level-3 node as its level-4 parent commands it (the global
// domain transaction and staging): a remote session, a level-3 worker in
// a child process (a NodeProcess), or one in this process. Every kind of
// node serves the commands with the same code (Worker.Command, on the
// node, which hands each to the role registered for it).
type Node interface {
	Command(c *wire.Control) (wire.ControlReply, error)
}
