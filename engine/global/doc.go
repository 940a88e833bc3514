// Package global is the global-domain role of a Worker: communication
// domains across level-3 nodes, brokered by a level-4 (or higher) worker.
//
// The broker (this file, spec.go, stage.go, warm.go) validates a domain,
// runs the transaction over its member nodes (txn.go, a state machine the
// tests step), stages bytes into and out of its windows, remembers pooled
// windows for the next domain over the same members, and frees the domain
// after its run's fence (engine.Run.OnFence) or at close
// (engine.Worker.OnClose). The node side (node.go, reattach.go) serves the
// transaction's commands on a level-3 worker, registered with
// engine.RegisterControl from this package's init: a binary that serves
// global commands (a node process, a remote daemon) links this package.
//
// The package imports engine, as engine/proc and engine/remote do, and
// none of them imports it. Each role keeps its state on the Worker
// (engine.Worker.Role): the broker's in a broker, the node's in a node.
//
// Lock order: a broker's mu, then a Domain's mu; a node's mu is a leaf.
// None of them is held while calling into the Worker (which takes w.mu) or
// while a node command is in flight. The one role lock held across a call
// into the Worker is the sync.Once with which a role's first use
// registers its close hook (OnClose takes w.mu): before w.mu, as engine's
// hooks allow.
package global
