package engine

import (
	"sync"
	"time"

	"simpler/wire"
)

// startProcs brings up a child process per chip and per SUB worker, all
// under one deadline, and ships every registered callable to each. A
// failure stops the ones that started. Caller holds w.mu.
func (w *Worker) startProcs() error {
	deadline := time.Now().Add(w.cfg.StartupTimeout)
	n, ns := len(w.cfg.DeviceIDs), w.cfg.NumSubWorkers
	procs := make([]*proc, n+ns)
	errs := make([]error, n+ns)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			role, id, device := roleChip, i, -1
			if i < n {
				device = w.cfg.DeviceIDs[i]
			} else {
				role, id = roleSub, i-n
			}
			init := wire.MailboxInit{Role: role, WorkerID: id, Platform: w.cfg.Platform.Name(), Device: device}
			procs[i], errs[i] = startProc(w.cfg.Launcher, w.workerName(poolOf(role), id), init, w.cfg.ControlTimeout, deadline)
		}()
	}
	wg.Wait()
	w.chipProcs, w.subProcs = procs[:n], procs[n:]
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	for i, p := range w.chipProcs {
		w.chips = append(w.chips, &procChip{p: p, id: w.cfg.DeviceIDs[i], platform: w.cfg.Platform})
	}
	return w.shipRegistry()
}

// shipRegistry sends every registered callable to every child process.
func (w *Worker) shipRegistry() error {
	for _, h := range w.reg.byDigest {
		for _, p := range w.procs() {
			if err := p.register(h.Callable); err != nil {
				return err
			}
		}
	}
	return nil
}

// procs lists every child process of the worker.
func (w *Worker) procs() []*proc {
	var ps []*proc
	for _, p := range append(append(append([]*proc(nil), w.chipProcs...), w.subProcs...), w.nodeProcs...) {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// startNodes brings up each level-3 child as a process of its own, which
// brings its own chips and SUB workers up before it answers. One deadline
// covers the whole tree. Caller holds w.mu.
func (w *Worker) startNodes() error {
	deadline := time.Now().Add(w.cfg.StartupTimeout)
	procs := make([]*proc, len(w.children))
	errs := make([]error, len(w.children))
	var wg sync.WaitGroup
	for i, child := range w.children {
		if child == nil {
			continue // a remote node
		}
		cfg := child.cfg
		cfg.StartupTimeout = time.Until(deadline)
		wg.Add(1)
		go func() {
			defer wg.Done()
			init := wire.MailboxInit{Role: roleNode, WorkerID: i, Node: nodeConfig(cfg)}
			procs[i], errs[i] = startProc(w.cfg.Launcher, w.workerName(NextLevel, i), init, w.cfg.ControlTimeout, deadline)
		}()
	}
	wg.Wait()
	w.nodeProcs = procs
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return w.shipRegistry()
}

func poolOf(role uint8) Pool {
	if role == roleSub {
		return Sub
	}
	return NextLevel
}
