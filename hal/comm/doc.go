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
// The files: alloc.go (Allocate, Release), join.go (the allocation
// barrier), view.go (the kernel side), layout.go (the CommContext and
// header layouts), objects.go (the shm cache and pool), global.go and
// descriptor.go (global domains).
package comm
