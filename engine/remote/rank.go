package remote

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"simpler/engine"
	"simpler/internal/hostid"
	"simpler/wire"
)

// A rank of a worker group is a remote-l3-worker that dials its level-4
// worker instead of listening (`simpler remote-l3-worker --connect`): a
// launcher started it, or a Kubernetes Indexed Job, and it knows the
// worker's address and the token. On the connection it dialled the
// handshake is mutual: the worker's CHALLENGE, the rank's JOIN (its proof
// over that challenge, its own nonce, and what it is), then the worker's
// HELLO, whose proof is over the rank's nonce. Until that proof checks,
// the rank does nothing for the worker; then it serves the session the
// HELLO asks for in a session process of its own, exactly as a daemon
// serves one it accepted, and ends when the session ends.

// RankConfig is how a rank reaches its level-4 worker and what it offers.
type RankConfig struct {
	Connect   string // the worker's host:port
	Token     []byte // what both sides prove
	Rank      int    // its rank in the group (RankFromEnv, or --rank)
	Platform  string
	DeviceIDs []int         // the devices it offers; empty: none named (the worker's choice)
	Timeout   time.Duration // bounds reaching the worker (it may not listen yet) and the handshake
	// Daemon is the session's launcher, log and limits (Token is Token).
	Daemon DaemonConfig
}

// RankEnv are the launchers' variables a rank's number is read from, in
// the order they are tried: Open MPI, PMIx, MPICH (PMI), Slurm, a
// Kubernetes Indexed Job.
var RankEnv = []string{"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "JOB_COMPLETION_INDEX"}

// RankFromEnv is the rank the first of RankEnv that getenv sets says, and
// that variable's name; with none set it is an error that lists them.
func RankFromEnv(getenv func(string) string) (int, string, error) {
	for _, name := range RankEnv {
		v := getenv(name)
		if v == "" {
			continue
		}
		r, err := strconv.Atoi(v)
		if err != nil || r < 0 || r >= wire.MaxGroupRanks {
			return 0, name, engine.Errorf(engine.ValueError, "$%s is %q, not a rank in 0..%d", name, v, wire.MaxGroupRanks-1)
		}
		return r, name, nil
	}
	return 0, "", engine.Errorf(engine.ValueError, "no rank: give --rank N, or run under a launcher that sets one of $%s (none is set)", strings.Join(RankEnv, ", $"))
}

// ServeRank dials the level-4 worker at cfg.Connect, joins its group and
// serves the session it asks for until the session ends, or until stop
// closes (the rank is told to go: the session is ended).
func ServeRank(cfg RankConfig, stop <-chan struct{}) error {
	dc := cfg.Daemon
	dc.Token = cfg.Token
	dc.MaxSessions = 1
	d, err := NewDaemon(nil, dc)
	if err != nil {
		return err
	}
	defer d.Close()
	deadline := time.Now().Add(cfg.Timeout)
	conn, err := dialUntil(cfg.Connect, deadline, stop)
	if err != nil {
		return err
	}
	start, err := d.join(conn, cfg, deadline)
	if err != nil {
		conn.Close()
		return fmt.Errorf("rank %d: %w", cfg.Rank, err)
	}
	s, err := d.startSession(conn, start)
	if err != nil {
		conn.Close()
		return fmt.Errorf("rank %d: %w", cfg.Rank, err)
	}
	select {
	case <-s.ended:
	case <-stop:
	}
	return nil
}

// dialUntil connects to addr, trying again while nothing listens there
// yet (a pod of an Indexed Job may start before its level-4 worker),
// until deadline or stop.
func dialUntil(addr string, deadline time.Time, stop <-chan struct{}) (net.Conn, error) {
	wait := 20 * time.Millisecond
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Until(deadline))
		if err == nil {
			return conn, nil
		}
		if time.Until(deadline) < wait {
			return nil, engine.Errorf(engine.TimeoutError, "cannot reach the level-4 worker at %s within --connect-timeout: %v", addr, errors.Unwrap(err))
		}
		select {
		case <-time.After(wait):
		case <-stop:
			return nil, engine.Errorf(engine.RuntimeError, "told to stop before the level-4 worker at %s answered", addr)
		}
		wait = min(2*wait, time.Second)
	}
}

// join runs the rank's side of the handshake on conn and returns what its
// session process is started with: the worker's HELLO, once its proof
// over the rank's nonce checks.
func (d *Daemon) join(conn net.Conn, cfg RankConfig, deadline time.Time) (*wire.Link, error) {
	conn.SetDeadline(deadline)
	defer conn.SetDeadline(time.Time{})
	h, payload, err := wire.ReadFrame(conn, wire.TypeChallenge.MaxPayload())
	if err != nil {
		return nil, handshakeError("no challenge from the level-4 worker", err)
	}
	if h.Type != wire.TypeChallenge {
		return nil, engine.Errorf(engine.RuntimeError, "the level-4 worker opened with %s, want CHALLENGE", h.Type)
	}
	ch, err := wire.DecodeChallenge(payload)
	if err != nil {
		return nil, err
	}
	host := hostid.Local()
	j := &wire.Join{Version: wire.ProtocolVersion, Rank: cfg.Rank, Host: wire.Host{Name: host.Name, Key: host.Key},
		PID: uint32(os.Getpid()), Platform: cfg.Platform, DeviceIDs: cfg.DeviceIDs}
	rand.Read(j.Nonce[:])
	j.Proof = wire.ProveJoin(cfg.Token, ch.Nonce, j.Nonce, cfg.Rank)
	if err := wire.WriteMessage(conn, wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeJoin}, j, nil); err != nil {
		return nil, err
	}
	h, err = wire.ReadHeader(conn, wire.MaxHello)
	if err != nil {
		return nil, handshakeError("no answer to JOIN", err)
	}
	if payload, err = wire.ReadPayload(conn, h, nil); err != nil {
		return nil, handshakeError("no answer to JOIN", err)
	}
	switch h.Type {
	case wire.TypeShutdown:
		why, err := wire.DecodeShutdown(payload)
		if err != nil {
			return nil, err
		}
		return nil, engine.Errorf(engine.RuntimeError, "the level-4 worker at %s refused this rank: %s", cfg.Connect, why.Reason)
	case wire.TypeHello:
	default:
		return nil, engine.Errorf(engine.RuntimeError, "the level-4 worker answered JOIN with %s", h.Type)
	}
	hello, err := wire.DecodeHello(payload)
	if err != nil {
		return nil, refuse(conn, h, engine.Errorf(engine.ValueError, "HELLO: %v", err))
	}
	if !wire.Verify(cfg.Token, j.Nonce, h.Session, hello.Parent, hello.Proof) {
		// The worker proves the token too: a process that only listens
		// where a rank was told to dial learns nothing and runs nothing.
		refuse(conn, h, engine.Errorf(engine.ValueError, "HELLO: the token proof does not match"))
		return nil, engine.Errorf(engine.ValueError, "the level-4 worker at %s did not prove the token (its HELLO's proof does not match)", cfg.Connect)
	}
	return &wire.Link{Kind: wire.LinkStart, Daemon: d.id, Session: h.Session, Worker: h.Worker, Limits: d.cfg.Limits, Hello: payload}, nil
}
