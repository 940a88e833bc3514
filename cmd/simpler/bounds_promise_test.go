package main

import (
	"testing"

	"simpler/engine/remote"
)

// The defaults of the daemon's bound flags are the ones
// docs/security.md's table gives: with no flag, --max-buffer-bytes is
// half of /dev/shm's free space and --max-total-bytes three quarters
// (the daemon's default, remote.DefaultTotalBytes), a copy 64 MiB, the
// queue 1024 tasks and 256 MiB, a module's top level 10 000 000 steps,
// 64 sessions, 64 pending connections and 1 MiB of a session's output.
func TestDaemonFlagDefaults(t *testing.T) {
	var o remoteOptions
	fs := flagSet("remote-l3-worker")
	o.register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	before := shmFree()
	if err := checkLimits(&o.lim, o.queued); err != nil {
		t.Fatal(err)
	}
	after := shmFree()
	if lo, hi := min(before, after)/2, max(before, after)/2; o.lim.BufferBytes < lo || o.lim.BufferBytes > hi {
		t.Errorf("--max-buffer-bytes defaults to %d, want half of /dev/shm's free space (%d..%d)", o.lim.BufferBytes, lo, hi)
	}
	if o.totalBytes != 0 {
		t.Errorf("--max-total-bytes defaults to %d, want 0 (the daemon's own default)", o.totalBytes)
	}
	total, free := remote.DefaultTotalBytes(), shmFree()
	if total > free/4*3+free/8 || total < free/4*3-free/8 {
		t.Errorf("the daemon's total bound defaults to %d, want about three quarters of %d", total, free)
	}
	for _, c := range []struct {
		flag      string
		got, want uint64
	}{
		{"--max-copy-bytes", o.lim.CopyBytes, 64 << 20},
		{"--max-queued-tasks", uint64(o.lim.QueuedTasks), 1024},
		{"--max-queued-bytes", o.lim.QueuedBytes, 256 << 20},
		{"--max-load-steps", o.lim.LoadSteps, 10_000_000},
		{"--max-sessions", uint64(o.maxSessions), 64},
		{"--max-pending", uint64(o.maxPending), 64},
		{"--max-output-bytes", o.maxOutput, 1 << 20},
	} {
		if c.got != c.want {
			t.Errorf("%s defaults to %d, want %d", c.flag, c.got, c.want)
		}
	}
}
