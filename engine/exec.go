package engine

import (
	"fmt"
)

// workerName names an endpoint the way errors show it.
func (w *Worker) workerName(p Pool, id int) string {
	switch {
	case p == Sub:
		return fmt.Sprintf("sub_worker %d", id)
	case w.tree.isRemote(id):
		return fmt.Sprintf("remote_worker %d", id)
	case w.cfg.Level >= 4:
		return fmt.Sprintf("child_worker %d", id)
	default:
		return fmt.Sprintf("chip_worker %d (device %d)", id, w.cfg.DeviceIDs[id])
	}
}

// wake wakes the goroutines waiting on the task window, a drain or heap
// space when a core step says something they wait for changed. Caller
// holds w.mu.
func (w *Worker) wake(eff Effects) {
	if eff.Wake && w.cfg.Det != nil {
		w.detWakes++ // what detWait's Procs wait for
	}
	if eff.Wake && w.waiters > 0 {
		w.cond.Broadcast()
	}
}
