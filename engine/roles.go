package engine

// What a role layered on a Worker (engine/global's broker and node side)
// reads of it, besides the seams of hooks.go. Each accessor gives one
// thing; none holds w.mu past its return.

import (
	"crypto/rand"
	"encoding/binary"
	"time"

	"simpler/hal/shm"
)

// ClusterID names this worker's cluster: a broker sends it in every
// global-domain topology, so a node can tell domains of different brokers
// apart, and a remote node binds its exports to it as their parent. Drawn
// once per worker, on first use.
func (w *Worker) ClusterID() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.cluster == 0 {
		var b [8]byte
		rand.Read(b[:])
		w.cluster = binary.LittleEndian.Uint64(b[:])
	}
	return w.cluster
}

// Ready refuses op unless the worker is initialised, open and not
// poisoned.
func (w *Worker) Ready(op string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ready(op)
}

// ShmPrefix starts the names of the shared-memory objects this worker
// makes: under this process's prefix (so its leak check sees them) and
// this worker's namespace, so that no other worker of the process makes
// names of the same shape.
func (w *Worker) ShmPrefix() string { return shm.Prefix() + w.namespace + "-" }

// BuildingRun is a run whose orchestration function is running, or nil.
func (w *Worker) BuildingRun() *Run {
	w.mu.Lock()
	defer w.mu.Unlock()
	for r := range w.runs {
		if r.core.Building() {
			return r
		}
	}
	return nil
}

// Building refuses op unless o's run is still being built by a usable
// worker: what may be added to a run only from inside its orchestration
// function.
func (o *Orchestrator) Building(op string) error {
	o.w.mu.Lock()
	defer o.w.mu.Unlock()
	return o.building(op)
}

// EmitNodeStep reports a command a broker sent to NEXT_LEVEL node and its
// outcome as an event (e's Kind, say GlobalStep), naming the node as errors
// do; it does nothing when w has no observer.
func (w *Worker) EmitNodeStep(node int, e Event, start time.Time) {
	if !w.events.on() {
		return
	}
	e.Worker, e.Dur = w.workerName(NextLevel, node), time.Since(start)
	w.events.emit(e)
}

// Poisoned is why the worker refuses work after a cleanup that could not
// complete (Poison), or nil.
func (w *Worker) Poisoned() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.poisoned
}
