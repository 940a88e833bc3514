package remote

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"simpler/engine"
	"simpler/internal/enginetest"
)

// childPids are the children of pid, from /proc: those of each of its
// threads (a child is listed under the thread that forked it).
func childPids(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("no threads of pid %d in /proc: %v", pid, err)
	}
	var pids []int
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}

// The same for a rank of a worker group, whose daemon is the rank process
// itself: its session sent SIGSTOP mid-task is noticed by the level-4
// worker within remote_session_timeout_s (1 s here, plus slack), and the
// rank, its parent gone, kills the session after its reap grace (3 s),
// removes what the session held and exits.
func TestGroupRankStoppedSession(t *testing.T) {
	const timeout = time.Second
	gt := newGroupTest(t, engine.GroupSpec{Ranks: 1, Launcher: engine.LauncherNone}, engine.Config{SessionTimeout: timeout})
	gt.start = func(addr, tokenFile string) { gt.startRank(addr, tokenFile, 0, nil) }
	gt.init()
	defer gt.w.Close() // before waitRanks, also when the test fails early
	register(t, gt.w, nodeOrch{procKernel{"node_spin"}})
	register(t, gt.w, procKernel{"spin"})
	spin, _ := gt.w.Registry().Lookup(nodeOrch{procKernel{"node_spin"}}.Digest())
	buf := enginetest.Must(outside(gt.w).Malloc(gt.ids[0], 1<<20))
	r := enginetest.Must(gt.w.Submit(asBuild(func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(spin, mkArgs(remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: 7}, Ref: engine.RemoteRef{Buf: buf}}, engine.OutputExisting), nil, gt.ids[0])
		return err
	})))
	sb := make([]byte, 8)
	poll(t, "the kernel to start on the rank", func() bool {
		return Watch(buf, sb, 0) == nil && get64(sb) == 1
	})
	rank := gt.ranks[0]
	sessions := childPids(t, rank.cmd.Process.Pid)
	if len(sessions) != 1 {
		t.Fatalf("the rank has children %v, want its one session", sessions)
	}
	session := sessions[0]
	prefix := envPrefix(t, session)
	if len(objectsOf(prefix)) == 0 {
		t.Fatalf("the rank's session (pid %d) holds no shared-memory object", session)
	}
	stopped := time.Now()
	if err := syscall.Kill(session, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	node := gt.group.Nodes()[0]
	var lost error
	for lost == nil && time.Since(stopped) < 10*timeout {
		time.Sleep(5 * time.Millisecond)
		lost = node.Lost()
	}
	took := time.Since(stopped)
	if engine.KindOf(lost) != engine.TimeoutError || took > timeout+250*time.Millisecond {
		t.Errorf("a rank's stopped session: %v after %v; want a TimeoutError within %v", lost, took, timeout)
	}
	if err := r.Wait(deadline); err == nil {
		t.Error("the run on the stopped rank succeeded")
	}
	select {
	case <-rank.done:
	case <-time.After(DefaultReapGrace + deadline):
		syscall.Kill(session, syscall.SIGKILL)
		t.Fatal("the rank did not end its stopped session")
	}
	if gone := time.Since(stopped); gone < took+DefaultReapGrace-reapLook {
		t.Errorf("the rank ended %v after the stop, before its reap grace", gone)
	}
	if err := syscall.Kill(session, 0); err != syscall.ESRCH {
		t.Errorf("the stopped session %d after its rank ended: %v, want ESRCH", session, err)
	}
	if objs := objectsOf(prefix); len(objs) != 0 {
		t.Errorf("the killed session's objects are still there: %v", objs)
	}
	if !strings.Contains(rank.stderr.String(), "of its parent leaving; killing it") {
		t.Errorf("the rank did not say it killed its session:\n%s", rank.stderr.String())
	}
}
