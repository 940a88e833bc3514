package remote

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"simpler/engine"
	"simpler/internal/token"
	"simpler/wire"
)

// A worker group's start-up, on the level-4 side: listen, start one
// launcher whose ranks dial back (rankArgs), and wait for every rank under
// the start-up deadline. Each connection gets the CHALLENGE and nothing
// else until its JOIN's proof checks (bounded, paced per address like a
// daemon's HELLO); then the rendezvous decides whether the rank may come
// up, and the rank's node is brought up on the connection as a dialled
// one is (attach: HELLO, READY, BUNDLE). All or nothing: the first
// failure closes every node that came up, stops listening, and ends the
// launcher's process group.

// StarterConfig is how StartGroup starts the ranks of this host's groups.
type StarterConfig struct {
	// Rank is the rank program and its subcommand ("/usr/bin/simpler",
	// "remote-l3-worker"); rankArgs follow it.
	Rank []string
	// Env is added to the launcher's environment (and so its ranks' on
	// this host).
	Env []string
	// OnListen, if set, is told where a group listens and which token
	// file its ranks read, before the launcher starts: with launcher
	// "none", whoever starts the ranks needs both.
	OnListen func(req engine.GroupRequest, addr, tokenFile string)
}

// StartGroup is the engine.GroupStarter of cfg (engine.Config.StartGroup).
func StartGroup(cfg StarterConfig) engine.GroupStarter {
	return func(req engine.GroupRequest) (engine.RemoteGroup, error) {
		g, err := startGroup(cfg, req)
		if err != nil {
			return nil, err // not a nil *group inside a non-nil interface
		}
		return g, nil
	}
}

// group is a started group: the engine.RemoteGroup.
type group struct {
	name   string
	nodes  []engine.RemoteNode
	pids   []int     // each rank's process, as its JOIN said
	launch *launcher // nil for launcher "none"
}

func (g *group) Nodes() []engine.RemoteNode { return g.nodes }

// Close waits for the launcher to exit now that its ranks' sessions have
// ended, and ends it after timeout.
func (g *group) Close(timeout time.Duration) error {
	if g.launch == nil {
		return nil
	}
	if g.launch.end(time.Now().Add(timeout)) {
		return engine.Errorf(engine.RuntimeError, "close: %s: %s (pid %d) was still running %v after its ranks' sessions ended; its process group was ended%s",
			g.name, g.launch.name, g.launch.cmd.Process.Pid, timeout, g.launch.out)
	}
	return nil
}

// Kill asks the launcher's process group to end at once (Close then
// waits for it).
func (g *group) Kill() {
	if g.launch != nil {
		syscall.Kill(-g.launch.cmd.Process.Pid, syscall.SIGTERM)
	}
}

func startGroup(cfg StarterConfig, req engine.GroupRequest) (*group, error) {
	spec := req.Spec
	if err := checkRootConsent(spec, os.Geteuid(), os.Getenv, cfg.Env); err != nil {
		return nil, engine.Wrap(err, req.Name)
	}
	ln, err := net.Listen("tcp", spec.Listen)
	if err != nil {
		return nil, engine.Errorf(engine.RuntimeError, "%s: listen=%q: %v", req.Name, spec.Listen, errors.Unwrap(err))
	}
	defer ln.Close() // once every rank is in, nothing listens
	addr := advertised(ln.Addr().(*net.TCPAddr))
	tokenFile, tok := spec.TokenFile, spec.Token
	if tokenFile == "" { // checkListen allowed it: loopback only
		path, t, err := token.GenerateGroup(ln.Addr().(*net.TCPAddr).Port)
		if err != nil {
			return nil, engine.Wrap(err, req.Name)
		}
		defer token.Remove(path) // the ranks have read it once they are in
		tokenFile, tok = path, t
	}
	if cfg.OnListen != nil {
		cfg.OnListen(req, addr, tokenFile)
	}
	g := &group{name: req.Name}
	if spec.Launcher != engine.LauncherNone {
		rank := append(slices.Clone(cfg.Rank), rankArgs(spec, addr, tokenFile, time.Until(req.Deadline))...)
		rank = append(rank, groupRaceArgs()...)
		if g.launch, err = startLauncher(launchArgs(spec, rank, isLoopbackAddr(addr)), cfg.Env); err != nil {
			return nil, engine.Wrap(err, req.Name)
		}
	}
	if err := g.gather(ln, tok, req); err != nil {
		if g.launch != nil {
			g.launch.end(time.Now())
		}
		return nil, err
	}
	return g, nil
}

// advertised is the address ranks are told to dial: the listener's, or
// this host's name with its port when it listens on every address.
func advertised(a *net.TCPAddr) string {
	if !a.IP.IsUnspecified() {
		return a.String()
	}
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return net.JoinHostPort(host, strconv.Itoa(a.Port))
}

// gatherer runs one start-up: the connections being handled, and the
// events they send the loop that steps the rendezvous.
type gatherer struct {
	req    engine.GroupRequest
	token  []byte
	z      *rendezvous
	gate   proofGate
	events chan event
	done   chan struct{} // closed when the start-up is over: handlers give up
	wg     sync.WaitGroup

	mu      sync.Mutex
	conns   map[net.Conn]bool // being handled, until a node owns one
	pending pendingConns      // not yet sent their JOIN
}

// event is what a connection's handler tells the loop: a rank that
// proved the token (reply gets the verdict), a refusal, or a node up or
// failed.
type event struct {
	join   wire.Join
	who    string
	reply  chan error
	refuse string
	rank   int
	pid    int
	node   *node
	err    error
}

// maxPendingJoins is the least bound on the connections that have not
// yet sent their JOIN; a group of more ranks allows two per rank, so that
// every rank of a group on one host (one address) may be joining at once.
// Beyond the bound, pendingConns drops the oldest of the newcomer's own
// address, or of the address with the most: a flood of bare connections
// from one address drops its own, not ranks joining from another.
const maxPendingJoins = 64

// pendingJoinBound is the pending bound of a group of ranks ranks.
func pendingJoinBound(ranks int) int { return max(maxPendingJoins, 2*ranks) }

// gather accepts ranks on ln until every one is up, or the start-up
// fails: then every node that came up is closed and every connection.
func (gr *group) gather(ln net.Listener, tok []byte, req engine.GroupRequest) error {
	g := &gatherer{req: req, token: tok, events: make(chan event), done: make(chan struct{}), conns: map[net.Conn]bool{},
		pending: newPendingConns(pendingJoinBound(req.Spec.Ranks)), z: newRendezvous(req.Name, req.Spec, time.Until(req.Deadline).Round(time.Second))}
	g.wg.Add(1)
	go g.accept(ln)
	nodes := make([]*node, req.Spec.Ranks)
	gr.pids = make([]int, req.Spec.Ranks)
	err := g.loop(nodes, gr.pids, gr.launch)
	close(g.done)
	ln.Close()
	g.mu.Lock()
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	g.wg.Wait()
	if err != nil {
		for _, n := range nodes {
			if n != nil {
				n.Close()
			}
		}
		return err
	}
	for _, n := range nodes {
		gr.nodes = append(gr.nodes, n)
	}
	return nil
}

// loop steps the rendezvous with the handlers' events, the launcher's
// exit and the deadline, until it is done.
func (g *gatherer) loop(nodes []*node, pids []int, l *launcher) error {
	timer := time.NewTimer(time.Until(g.req.Deadline))
	defer timer.Stop()
	var exited <-chan struct{}
	output := func() string { return "" }
	if l != nil {
		exited, output = l.exited, l.out.String
	}
	for !g.z.done() {
		select {
		case e := <-g.events:
			switch {
			case e.reply != nil:
				e.reply <- g.z.claim(e.join, e.who)
			case e.refuse != "":
				g.z.refuse(e.who, e.refuse)
			default:
				g.z.ready(e.rank, e.err)
				nodes[e.rank], pids[e.rank] = e.node, e.pid
			}
		case <-exited:
			g.z.launcherExited(l.name, l.status(), output())
		case <-timer.C:
			g.z.expired(output())
		}
	}
	return g.z.fatal
}

// accept hands each connection to a handler of its own until ln closes.
func (g *gatherer) accept(ln net.Listener) {
	defer g.wg.Done()
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		select {
		case <-g.done:
			g.mu.Unlock()
			conn.Close()
			return
		default:
		}
		if drop := g.pending.add(conn, hostOf(conn.RemoteAddr())); drop != nil {
			drop.Close() // its handshake fails at once
		}
		g.conns[conn] = true
		g.wg.Add(1)
		g.mu.Unlock()
		go g.handle(conn)
	}
}

// send passes e to the loop, or reports that the start-up is over.
func (g *gatherer) send(e event) bool {
	select {
	case g.events <- e:
		return true
	case <-g.done:
		return false
	}
}

// handle runs one connection: the handshake, the rank's claim, and its
// node's start.
func (g *gatherer) handle(conn net.Conn) {
	defer g.wg.Done()
	from := conn.RemoteAddr().String()
	j, err := g.handshake(conn)
	g.unpend(conn) // when the handshake failed before its JOIN was read
	if err != nil {
		g.send(event{who: from, refuse: err.Error()})
		g.drop(conn)
		return
	}
	who := fmt.Sprintf("rank %d (pid %d on host %s, %s)", j.Rank, j.PID, j.Host.Name, from)
	reply := make(chan error, 1)
	if !g.send(event{join: j, who: who, reply: reply}) {
		g.drop(conn)
		return
	}
	if verdict := <-reply; verdict != nil {
		shutdown(conn, verdict.Error())
		g.drop(conn)
		return
	}
	req := g.req.Ranks[j.Rank]
	req.Spec.Endpoint = fmt.Sprintf("%s (pid %d on host %s)", from, j.PID, j.Host.Name) // what its errors name
	// The token is the group's, perhaps made at its start.
	req.Spec.Token = g.token
	n, err := attach(conn, req, &j.Nonce, fmt.Sprintf("rank %d", j.Rank)) // closes conn on failure
	g.mu.Lock()
	delete(g.conns, conn) // the node owns it now
	g.mu.Unlock()
	if !g.send(event{rank: j.Rank, pid: int(j.PID), node: n, err: err}) && n != nil {
		n.Close()
	}
}

// unpend stops counting conn as pending: its JOIN has been read (a
// connection whose refusal the gate holds is bounded there, and dropping
// it would answer its guess early), or its handshake ended.
func (g *gatherer) unpend(conn net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pending.remove(conn)
}

// drop closes a connection this start-up will not use.
func (g *gatherer) drop(conn net.Conn) {
	g.mu.Lock()
	delete(g.conns, conn)
	g.mu.Unlock()
	conn.Close()
}

// handshake sends the CHALLENGE and reads and checks the JOIN: a frame of
// at most wire.MaxJoin bytes under a deadline, its proof checked at once
// and a wrong one refused no sooner than the proof gate allows.
func (g *gatherer) handshake(conn net.Conn) (wire.Join, error) {
	deadline := time.Now().Add(HelloTimeout)
	if g.req.Deadline.Before(deadline) {
		deadline = g.req.Deadline
	}
	conn.SetDeadline(deadline)
	defer conn.SetDeadline(time.Time{})
	var ch wire.Challenge
	rand.Read(ch.Nonce[:])
	if err := wire.WriteMessage(conn, wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeChallenge}, &ch, nil); err != nil {
		return wire.Join{}, err
	}
	h, err := wire.ReadHeader(conn, wire.MaxJoin)
	if err != nil {
		return wire.Join{}, err
	}
	if h.Type != wire.TypeJoin {
		return wire.Join{}, fmt.Errorf("first frame is %s, want JOIN", h.Type)
	}
	payload, err := wire.ReadPayload(conn, h, nil)
	if err != nil {
		return wire.Join{}, err
	}
	g.unpend(conn)
	j, err := wire.DecodeJoin(payload)
	if err != nil {
		return wire.Join{}, fmt.Errorf("JOIN: %v", err)
	}
	err = g.gate.decide(hostOf(conn.RemoteAddr()), g.done, func() bool {
		return wire.VerifyJoin(g.token, ch.Nonce, j.Nonce, j.Rank, j.Proof)
	})
	if err == errWrongProof {
		err = engine.Errorf(engine.ValueError, "JOIN: the token proof does not match") // one fixed message
	}
	if err != nil {
		shutdown(conn, err.Error())
		return wire.Join{}, err
	}
	return j, nil
}

// shutdown tells the peer why it is turned away, best effort.
func shutdown(conn net.Conn, why string) {
	if len(why) > wire.MaxReason {
		why = why[:wire.MaxReason]
	}
	conn.SetWriteDeadline(time.Now().Add(time.Second))
	wire.WriteMessage(conn, wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeShutdown, Session: randomID()}, &wire.Shutdown{Reason: why}, nil)
}
