package proc

import (
	"simpler/engine"
	"simpler/wire"
)

// Spawner is the engine.Spawner of child processes (engine.Config.Spawn):
// each process is the request's Launcher (this binary again, whose hidden
// subcommand calls RunChild), given its role in the mailbox's first
// request.
type Spawner struct{}

var _ engine.Spawner = Spawner{}

// SpawnChip starts the process of one chip.
func (Spawner) SpawnChip(req engine.SpawnRequest) (engine.ChipProcess, error) {
	init := wire.MailboxInit{Role: roleChip, WorkerID: req.ID, Platform: req.Platform.Name(), Device: req.Device}
	p, err := start(req, init)
	if err != nil {
		return nil, err
	}
	return &chipProcess{process: p, chip: &chip{p: p, id: req.Device, platform: req.Platform}}, nil
}

// SpawnSub starts the process of one SUB worker.
func (Spawner) SpawnSub(req engine.SpawnRequest) (engine.Process, error) {
	init := wire.MailboxInit{Role: roleSub, WorkerID: req.ID, Platform: req.Platform.Name(), Device: -1}
	p, err := start(req, init)
	if err != nil {
		return nil, err // not p: a nil *process in the interface is not nil
	}
	return p, nil
}

// SpawnNode starts the process of one level-3 node, which brings its own
// chips and SUB workers up before it answers.
func (Spawner) SpawnNode(req engine.SpawnRequest) (engine.NodeProcess, error) {
	init := wire.MailboxInit{Role: roleNode, WorkerID: req.ID, Node: nodeConfig(req.Node)}
	p, err := start(req, init)
	if err != nil {
		return nil, err
	}
	return nodeProcess{p}, nil
}

// nodeProcess is a level-3 node's process (an engine.NodeProcess): its
// global-domain commands go through the mailbox (process.global).
type nodeProcess struct{ *process }

func (n nodeProcess) Command(c *wire.Control) (wire.ControlReply, error) { return n.global(c) }
