package remote

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"simpler/engine"
	"simpler/internal/enginetest"
)

// Register waits on every node's answer, but not under w.mu: while one
// node does not answer, runs on the others go on.
func TestRegisterDoesNotHoldTheWorkerLock(t *testing.T) {
	_, a := startDaemon(t)
	db, b := startDaemon(t)
	w, err := newParent(engine.Config{Level: 4, Platform: sim(t), SessionTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range []string{a, b} {
		enginetest.Must(w.AddRemoteWorker(engine.RemoteSpec{Endpoint: ep, Platform: "a2a3sim", DeviceIDs: []int{0}}))
	}
	register(t, w, nodeOrch{procKernel{"node_noop"}})
	if err := w.Init(); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	stopped := sessionProcs(db)
	for _, p := range stopped {
		p.Signal(syscall.SIGSTOP)
	}
	defer func() {
		for _, p := range stopped {
			p.Signal(syscall.SIGCONT)
		}
	}()
	for _, p := range stopped {
		poll(t, "the session to stop", func() bool {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid))
			_, after, _ := strings.Cut(string(stat), ") ")
			return err == nil && strings.HasPrefix(after, "T")
		})
	}
	regDone := make(chan error, 1)
	go func() {
		_, err := w.Registry().Register(nodeOrch{procKernel{"node_add1"}}, nil)
		regDone <- err
	}()
	noop, _ := w.Registry().Lookup(nodeOrch{procKernel{"node_noop"}}.Digest())
	start := time.Now()
	mustRun(t, w, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(noop, nil, nil, 0)
		return err
	})
	if el := time.Since(start); el > time.Second {
		t.Errorf("a run on the answering node took %v while Register waited on the other", el)
	}
	if err := <-regDone; engine.KindOf(err) != engine.TimeoutError {
		t.Errorf("register on a stopped node: %v", err)
	}
}
