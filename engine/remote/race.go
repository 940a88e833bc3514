package remote

import (
	"fmt"
	"io"
	"sync/atomic"

	"simpler/engine"
	"simpler/internal/race"
	"simpler/wire"
)

// --race on remote nodes. A daemon started with --race starts every
// session with a detector of its own (ServeSessionFD's race): the node's
// kernels, SUB callables and orchestration are checked in the session
// process, against the node's own memory, exactly as a level-3 Worker is
// checked in thread mode. Its reports are the session's stderr, which
// reaches the parent as OUTPUT lines tagged with the node. Its count
// reaches the parent by the protocol: every COMPLETION carries the
// session's RaceCount (whether it checks, and the distinct races so far),
// and the parent keeps each node's latest (RemoteRaces), which the CLI
// adds to its own detector's to decide the exit status.

// raceOutput is where the session's detector writes its reports: to the
// parent, as stderr lines of the session's code, within the same bound.
// Not to the daemon's log as well: the parent that asked for the work is
// who reads them, and a daemon a script started shares the script's
// stderr, where each report would then show twice.
func (s *session) raceOutput() io.Writer {
	return &sessionPrint{stream: wire.StreamStderr, local: io.Discard, budget: s.stderr.budget}
}

// raceCount is what the session's detector found so far, for a
// COMPLETION.
func (s *session) raceCount() wire.RaceCount {
	if s.race == nil {
		return wire.RaceCount{}
	}
	return wire.RaceCount{Checked: true, Races: uint32(min(s.race.Races(), wire.MaxRaces))}
}

// raceSetter is a resolver whose host code names the memory it makes for
// the detector (starlib's: host_tensor in a node's orchestration).
type raceSetter interface {
	SetRace(d *race.Detector)
}

// raceResolver gives r the session's detector, if it takes one.
func (s *session) raceResolver(r any) {
	if rs, ok := r.(raceSetter); ok && s.race != nil {
		rs.SetRace(s.race)
	}
}

// raceWait marks the node's orchestration waiting for run r until the
// returned func is called, which orders it after r's tasks: the next
// TASK's orchestration reads what they wrote without a race.
func (s *session) raceWait(r *engine.Run) func() {
	if s.race == nil {
		return func() {}
	}
	return r.RaceWait(s.race.Main())
}

// raceOutside counts n more (or, negative, fewer) global domains
// prepared here. Their other ranks run on other nodes, which this
// session's detector cannot see: while one is live, a rank here that
// waits for them is not stuck as far as this detector knows (the
// detector's Queue says exactly that), so their deadlocks come at the
// wait's timeout, as the issue allows for remote nodes, not as a false
// report of ranks that wait for another node.
func (s *session) raceOutside(n int) {
	if s.race != nil {
		s.race.Queue(n)
	}
}

// raceNameBuffer names a remote buffer's bytes in reports.
func (s *session) raceNameBuffer(b *sbuf, ref wire.BufferRef, imported bool) {
	if s.race == nil || b.len == 0 {
		return
	}
	what := fmt.Sprintf("remote buffer %d (generation %d) of this node", ref.ID, ref.Generation)
	if imported {
		what = fmt.Sprintf("imported remote buffer %d (generation %d) on this node", ref.ID, ref.Generation)
	}
	s.race.Name(race.Addr(b.bytes()), b.len, what, true)
}

// raceForgetBuffer drops what the detector knows of b's bytes: it is
// unmapped, and the next buffer mapped there starts clean.
func (s *session) raceForgetBuffer(b *sbuf) {
	if s.race == nil || b.len == 0 {
		return
	}
	s.race.Forget(race.Addr(b.bytes()), b.len)
}

// groupRace says the ranks this process starts for its worker groups
// run with --race (SetGroupRace).
var groupRace atomic.Bool

// SetGroupRace says whether the ranks this process starts for worker
// groups (add_worker_group's launcher) run with --race: simpler run
// --race sets it, as it starts a script's daemons with --race.
func SetGroupRace(on bool) { groupRace.Store(on) }

// groupRaceArgs are the flags a rank gets for --race.
func groupRaceArgs() []string {
	if groupRace.Load() {
		return []string{"--race"}
	}
	return nil
}

// raceTally is every remote node of this process that completed a task:
// process-wide, as the forwarded output is, so that it outlives the
// Workers.
var raceTally race.Tally

// noteRaces records c, the latest count node n sent.
func (n *node) noteRaces(c wire.RaceCount) { raceTally.Note(n, n.who, c.Checked, int(c.Races)) }

// RaceCount is what node n's detector found so far (nil before its first
// COMPLETION).
func (n *node) RaceCount() *race.NodeCount {
	c, ok := raceTally.Of(n)
	if !ok {
		return nil
	}
	return &c
}

// RemoteRaces is what every remote node of this process that ran a task
// found, in the order they first completed one.
func RemoteRaces() []race.NodeCount { return raceTally.Counts() }
