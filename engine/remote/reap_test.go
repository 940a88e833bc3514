package remote

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"simpler/engine"
	"simpler/hal/shm"
	"simpler/internal/enginetest"
)

// The reaper's decision stepped by hand: nothing while the parent is
// there; once it is gone, a kill at the grace and only once.
func TestReapWatchKillsOnceAfterTheGrace(t *testing.T) {
	w := reapWatch{grace: time.Second}
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		at   time.Duration
		gone bool
		kill bool
	}{
		{0, false, false},
		{time.Hour, false, false},
		{time.Hour + 1, true, false}, // gone from here
		{time.Hour + time.Second, true, false},
		{time.Hour + time.Second + 1, true, true},
		{time.Hour + 2*time.Second, true, false}, // killed once
	} {
		if kill := w.step(t0.Add(c.at), c.gone); kill != c.kill {
			t.Errorf("at %v (gone %v): kill %v, want %v", c.at, c.gone, kill, c.kill)
		}
	}
}

// reapWorker is a level-4 worker with one node at addr and a short
// session timeout; the test closes it.
func reapWorker(t *testing.T, addr string) *engine.Worker {
	t.Helper()
	w := enginetest.Must(newParent(engine.Config{Level: 4, Platform: sim(t), SessionTimeout: time.Second}))
	enginetest.Must(w.AddRemoteWorker(engine.RemoteSpec{Endpoint: addr, Platform: "a2a3sim", DeviceIDs: []int{0}}))
	if err := w.Init(); err != nil {
		w.Close()
		t.Fatal(err)
	}
	return w
}

// objectsOf are the shared-memory objects under a session's prefix.
func objectsOf(prefix string) []string {
	names, _ := shm.Leftovers(prefix)
	return names
}

// envPrefix is the shm prefix process pid was started with (a session's
// own, which its daemon gives it).
func envPrefix(t *testing.T, pid int) string {
	t.Helper()
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(string(env), "\x00") {
		if p, ok := strings.CutPrefix(kv, shm.PrefixEnv+"="); ok {
			return p
		}
	}
	t.Fatalf("process %d has no shm prefix in its environment", pid)
	return ""
}

// onlySessionPrefix is the prefix of d's one session.
func onlySessionPrefix(t *testing.T, d *Daemon) string {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.sessions {
		return s.prefix
	}
	t.Fatal("the daemon has no session")
	return ""
}

// A session process sent SIGSTOP whose parent then leaves cannot see it
// leave; the daemon does: it kills the session once ReapGrace has passed
// (not before), removes the shared-memory objects the session could not,
// reaps it and gives its slot back, so with --max-sessions 1 the next
// parent is served. A session that is not stopped ends by itself when its
// parent leaves, and is not killed.
func TestDaemonReapsAStoppedSessionItsParentLeft(t *testing.T) {
	const grace = 500 * time.Millisecond
	var log syncBuffer
	d, addr := startDaemonConfig(t, DaemonConfig{MaxSessions: 1, ReapGrace: grace, Log: &log})
	w := reapWorker(t, addr)
	enginetest.Must(outside(w).Malloc(0, 1<<20))
	procs := sessionProcs(d)
	if len(procs) != 1 {
		t.Fatalf("%d session processes, want 1", len(procs))
	}
	pid, prefix := procs[0].Pid, onlySessionPrefix(t, d)
	if len(objectsOf(prefix)) == 0 {
		t.Fatalf("the session (pid %d) holds no shared-memory object to leave behind", pid)
	}
	if err := procs[0].Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Stopped before its parent leaves, or it may see the parent go and
	// clean up first.
	waitStopped(t, pid)
	left := time.Now()
	nodeOf(w, 0).Fail(engine.Errorf(engine.RuntimeError, "the test's parent leaves"))
	poll(t, "the stopped session to be reaped", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.sessions) == 0 && len(d.live) == 0
	})
	took := time.Since(left)
	w.Close()
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Errorf("the session process %d after its slot was given back: kill 0 says %v, want ESRCH (reaped)", pid, err)
	}
	if took < grace {
		t.Errorf("the stopped session was ended %v after its parent left, before the grace of %v", took, grace)
	}
	if bound := grace + 2*reapLook + 500*time.Millisecond; took > bound {
		t.Errorf("the stopped session was ended %v after its parent left; the bound is %v", took, bound)
	}
	if objs := objectsOf(prefix); len(objs) != 0 {
		t.Errorf("the killed session's objects are still there: %v", objs)
	}
	for _, want := range []string{"did not end within 500ms of its parent leaving; killing it", "shared-memory objects; removed them"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the daemon's log has no %q:\n%s", want, log.String())
		}
	}

	// The slot is free: the next parent is served; its session, not
	// stopped, ends by itself when that parent leaves.
	w = reapWorker(t, addr)
	enginetest.Must(outside(w).Malloc(0, 8))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	poll(t, "the next session to end by itself", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.sessions) == 0
	})
	if n := strings.Count(log.String(), "killing it"); n != 1 {
		t.Errorf("%d sessions were killed, want only the stopped one:\n%s", n, log.String())
	}
}

// A daemon closing with a stopped session kills it after the grace,
// instead of waiting for it for ever; the parent still connected then
// sees its node lost.
func TestDaemonCloseEndsAStoppedSession(t *testing.T) {
	const grace = 300 * time.Millisecond
	d, addr := startDaemonConfig(t, DaemonConfig{ReapGrace: grace})
	w := reapWorker(t, addr)
	defer w.Close()
	enginetest.Must(outside(w).Malloc(0, 1<<20))
	procs := sessionProcs(d)
	if len(procs) != 1 {
		t.Fatalf("%d session processes, want 1", len(procs))
	}
	prefix := onlySessionPrefix(t, d)
	procs[0].Signal(syscall.SIGSTOP)
	waitStopped(t, procs[0].Pid)
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		d.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(deadline):
		procs[0].Signal(syscall.SIGKILL)
		<-closed
		t.Fatalf("the daemon's Close waited %v for a stopped session", deadline)
	}
	if took := time.Since(start); took < grace || took > grace+2*reapLook+500*time.Millisecond {
		t.Errorf("Close took %v with a stopped session; want the grace, %v, and a little more", took, grace)
	}
	if objs := objectsOf(prefix); len(objs) != 0 {
		t.Errorf("the killed session's objects are still there: %v", objs)
	}
	poll(t, "the parent to see its node lost", func() bool { return nodeOf(w, 0).Lost() != nil })
}
