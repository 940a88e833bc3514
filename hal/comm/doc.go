// Package comm implements communication domains on simulated chips: a
// window of device memory per rank that every rank of the domain can load
// from and store to, plus the kernel-side calls to signal (Notify), wait
// (Wait) and synchronise (Barrier) through it.
//
// The contract:
//
//   - Allocate is called once per rank, concurrently, each call on behalf of
//     one chip; Release once per rank. Nothing else is shared between the
//     calls: all cross-rank state is in POSIX shared memory, found by names
//     derived from the Request, so the ranks may be goroutines of one
//     process or separate processes that each call for their own rank.
//   - A rank's window is zero when Allocate returns, and was zeroed before
//     the rank joined the allocation barrier: once a peer has passed that
//     barrier, what it stores into the window stays there.
//   - A kernel reaches the domain only through the CommContext in device
//     memory (Rank.DeviceCtx); Open validates it and returns a View.
//   - Every call is bounded in time; a timeout names the domain, the rank
//     and which ranks were missing.
//   - Once every rank has released, no shm object of the domain remains
//     under its names. Objects this process created (windows, headers)
//     are kept mapped in a bounded process-wide pool under pool names, to
//     be cleared and renamed for the next allocation of the same size,
//     until DrainPool unmaps and unlinks them.
//   - A domain is released as a whole, once no kernel uses it: a released
//     object may be reused while a rank in another process still has it
//     mapped.
//
// Global domains span ranks on several nodes; a broker runs their
// transaction and each node calls, per local rank, PrepareGlobal (a window
// and its Descriptor), Import (the whole rank-ordered table; atomic and
// idempotent), Commit (the view goes live), Invalidate and Release.
//
// One rank core serves both kinds (rank.go, rankCore): a rank's window,
// its peers' windows and the header as shm objects and as mapped in the
// chip, the CommContext, and the rules for undoing them: attach (open the
// peers named by a table, map every window and the header in rank order,
// write the context dead), setLive, detach (atomically take back an
// attach: nothing is closed that the chip still maps) and teardown
// (everything, whatever the chip says; a rank removes the names it made).
// A local allocation is the core's phases run back to back in one call:
// prepare (header, window), the barrier in place of a broker's import
// (once every rank has joined, every window exists under the name the
// Request gives it: that is the table), attach, setLive(1). A global rank
// runs the same phases one broker command at a time.
//
// The cut is a core that both wrap, not a local domain made of a
// GlobalRank, because what the wrappers add differs for reasons: a local
// domain's names derive from the Request and its objects are pooled (it
// is released as a whole), while a global window is opened only with the
// secret sealed in it (seal.go) and is never in that pool (nodes release
// one by one, so a peer may still map it); a local header is made by whichever rank comes first,
// since the barrier lives in it, a global one by rank 0; and the global
// phase state (idempotent Import, broken, prepared claims) has no meaning
// for phases that run once, in one call.
//
// The files: rank.go (the rank core), alloc.go (Allocate, Release),
// join.go (the allocation barrier), global.go (PrepareGlobal ... Release),
// global_names.go (global requests and window names), seal.go (the
// secret that makes a global window a capability),
// global_orphan.go (a dead process's names), descriptor.go (the exported
// window), view.go (the kernel side), layout.go (the CommContext and
// header layouts), objects.go (the shm cache and pool).
package comm
