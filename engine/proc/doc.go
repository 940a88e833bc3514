// Package proc is the process transport of package engine: with
// mode="process" each chip and SUB worker of a level-3 Worker, and each
// local level-3 node of a level-4 one, is a child process of the same
// binary, and this package is both sides of it.
//
// Contract:
//
//   - The parent's side is Spawner, engine's Spawner (starlib sets
//     engine.Config.Spawn to Spawner{}): it starts a child from the
//     Worker's Launcher, hands it its role, and returns the Worker's
//     handle on it (an engine.Process, ChipProcess or NodeProcess). The
//     child's side is RunChild, which the launcher's hidden subcommand
//     calls with the binding's resolver.
//   - Parent and child share a mailbox (mailbox.go): a shared-memory
//     object with a task lane and a control lane, one request at a time
//     on each, woken by futexes after a short spin. Every wait on a reply
//     is bounded (a deadline, and a look at the child's health every
//     pollEvery); a control request that times out kills the child,
//     since its late answer would land in the lane the next request uses.
//   - Every message is wire's (wire/mailbox.go, wire/mailbox_ctl.go); this
//     package converts engine values to and from them (msg.go) and
//     decodes a request whole before acting on any of it. Bulk data never
//     crosses the mailbox: host memory is shared memory, named by object
//     and offset.
//   - A child maps each host object once, and lets the mapping go when
//     the parent has reclaimed (unlinked) the object and no task or copy
//     uses it (attach.go). At shutdown it also closes its resolver, which
//     holds the host memory its kernels made.
//   - A task the engine stops is asked to stop on the control lane; a
//     child that has not stopped it after engine.StopGrace is killed, and
//     started again in place before its slot's next task, with the
//     Worker's registrations (live.go). Every kill waits (bounded) until
//     the child is reaped, and a killed child gets no further request. A child that stops answering
//     health probes while it runs a task is killed the same way.
//   - A child whose parent dies stops its task and exits within
//     orphan.Grace (internal/orphan).
//
// The package imports engine, wire and the packages below them (hal,
// kind, internal/...), never engine/remote, starlib or cmd; engine never
// imports it.
package proc
