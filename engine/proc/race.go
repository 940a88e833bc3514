package proc

import (
	"fmt"
	"os"
	"time"

	"simpler/engine"
	"simpler/internal/race"
	"simpler/wire"
)

// --race for level-3 node processes (the children of a level-4 Worker in
// process mode). The node's NodeConfig says the parent runs with --race;
// the node process then checks its kernels, SUB callables and
// orchestration with a detector of its own, as a remote session does,
// reporting on its stderr (the parent's, which it inherits). Its count
// comes back by message, not text: after each task of a node process,
// and before it shuts one down, the parent asks OpRaceCount and keeps the
// latest answer (NodeProcessRaces), which the CLI adds to its own
// detector's.

// raceDetector is the detector a node process built from n runs with,
// nil without --race.
func raceDetector(n wire.NodeConfig) *race.Detector {
	if !n.Race {
		return nil
	}
	return race.New(os.Stderr)
}

// raceResolver gives the node's resolver its detector, so that host code
// names the memory it makes (starlib's resolver takes one).
func raceResolver(r engine.Resolver, d *race.Detector) {
	if rs, ok := r.(interface{ SetRace(*race.Detector) }); ok && d != nil {
		rs.SetRace(d)
	}
}

// waitRun waits for the node's run r; under --race the node's
// orchestration is ordered after r's tasks once it returns, so the next
// task's orchestration reads what they wrote without a race.
func (c *child) waitRun(r *engine.Run) error {
	if c.race != nil {
		defer r.RaceWait(c.race.Main())()
	}
	return r.Wait(-1)
}

// raceGlobal follows the global domains prepared on this node after a
// command that succeeded. Their other ranks run in other processes, which
// this detector cannot see: while one is live, a rank here that waits
// for them is not stuck as far as it knows (the detector's Queue says
// so), and their deadlocks come at the wait's timeout instead of as a
// false report of ranks that wait for another node's.
func (c *child) raceGlobal(g wire.Control) {
	if c.race == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.raceDoms == nil {
		c.raceDoms = map[uint64]bool{}
	}
	id, live := g.Domain.ID, c.raceDoms[g.Domain.ID]
	switch {
	case (g.Cmd == wire.CmdPrepare || g.Cmd == wire.CmdReattach) && !live:
		c.raceDoms[id] = true
		c.race.Queue(1)
	case (g.Cmd == wire.CmdAbort || g.Cmd == wire.CmdReleaseDomain) && live:
		delete(c.raceDoms, id)
		c.race.Queue(-1)
	}
}

// raceCount answers OpRaceCount.
func (c *child) raceCount() []byte {
	var n wire.RaceCount
	if c.race != nil {
		n = wire.RaceCount{Checked: true, Races: uint32(min(c.race.Races(), wire.MaxRaces))}
	}
	return ok(n.Encode)
}

// raceTally is every node process of this process that was asked, kept
// for the whole run (the CLI reads it after the script closed them).
var raceTally race.Tally

// NodeProcessRaces is what every node process asked so far found, in the
// order they were first asked.
func NodeProcessRaces() []race.NodeCount { return raceTally.Counts() }

// askRaces asks a node process of a parent under --race what its
// detector found, after each of its tasks and before it is shut down,
// and keeps the latest answer. The count only grows: a restarted node
// process starts from 0 again, and what its killed incarnation found is
// kept.
func (p *process) askRaces() {
	if p.init.Role != roleNode || !p.init.Node.Race {
		return
	}
	d, err := p.call(laneControl, []byte{wire.OpRaceCount}, time.Now().Add(p.timeout))
	if err != nil {
		return // gone or stuck: its reports are on stderr, its count is lost
	}
	n, err := wire.DecodeRaceCount(d)
	if err != nil {
		return
	}
	raceTally.Note(p, fmt.Sprintf("node process %d", p.init.WorkerID), n.Checked, int(n.Races))
}
