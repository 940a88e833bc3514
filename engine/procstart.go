package engine

import (
	"sync"
	"time"
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
			if i < n {
				procs[i], errs[i] = startProc(w.cfg.Launcher, w.workerName(NextLevel, i), roleChip, w.cfg.Platform.Name(), w.cfg.DeviceIDs[i], i, deadline)
			} else {
				procs[i], errs[i] = startProc(w.cfg.Launcher, w.workerName(Sub, i-n), roleSub, w.cfg.Platform.Name(), -1, i-n, deadline)
			}
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
	for _, h := range w.reg.byDigest {
		for _, p := range procs {
			if err := p.register(h.Callable); err != nil {
				return err
			}
		}
	}
	return nil
}
