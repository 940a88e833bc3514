package remote

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"simpler/engine"
	"simpler/internal/enginetest"
)

// A start-up deadline is honoured as given and reported as a
// TimeoutError for a daemon that accepts but never answers. (engine's
// TestStartupDeadlines has the child processes' half.)
func TestStartupDeadlineOfASilentDaemon(t *testing.T) {
	_, addr := startDaemon(t)
	ln, lerr := net.Listen("tcp", "127.0.0.1:0") // accepts into its backlog, never answers
	if lerr != nil {
		t.Fatal(lerr)
	}
	defer ln.Close()
	w2 := enginetest.Must(newParent(engine.Config{Level: 4, Platform: sim(t), StartupTimeout: 300 * time.Millisecond}))
	enginetest.Must(w2.AddRemoteWorker(engine.RemoteSpec{Endpoint: ln.Addr().String(), Platform: "a2a3sim", DeviceIDs: []int{0}, Token: defaultToken(t, addr)}))
	start := time.Now()
	err := w2.Init()
	if engine.KindOf(err) != engine.TimeoutError || time.Since(start) > 2*time.Second {
		t.Errorf("a silent daemon: %v after %v", err, time.Since(start))
	}
	w2.Close()
}

// A remote task under a deadline, and one cancelled, stop on the node; a
// node whose kernel will not stop is ended and marked failed, naming why.
func TestRemoteDeadlineAndCancel(t *testing.T) {
	_, addr := startDaemon(t)
	w := remoteWorker(t, addr)
	for _, k := range []string{"spin", "hang"} {
		register(t, w, nodeOrch{procKernel{"node_" + k}})
		register(t, w, procKernel{k})
	}
	node := func(k string) *engine.Handle {
		h, _ := w.Registry().Lookup(nodeOrch{procKernel{"node_" + k}}.Digest())
		return h
	}
	buf := enginetest.Must(outside(w).Malloc(0, 8))
	ref := remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: 7}, Ref: engine.RemoteRef{Buf: buf}}
	start := time.Now()
	err := runDone(t, w, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(node("spin"), mkArgs(ref, engine.OutputExisting), &engine.CallConfig{Timeout: 300 * time.Millisecond}, 0)
		return err
	})
	if engine.KindOf(err) != engine.TimeoutError || !strings.Contains(err.Error(), "remote_worker 0") || time.Since(start) > 3*time.Second {
		t.Errorf("a remote task past its deadline: %v after %v", err, time.Since(start))
	}
	r := enginetest.Must(w.Submit(asBuild(func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(node("spin"), mkArgs(ref, engine.OutputExisting), nil, 0)
		return err
	})))
	time.Sleep(50 * time.Millisecond) // let it start on the node: a cancel before works too, differently
	r.Cancel()
	if err := r.Wait(5 * time.Second); !strings.Contains(fmt.Sprint(err), "cancelled") {
		t.Errorf("a cancelled remote task: %v", err)
	}
	// The node still works.
	mustRun(t, w, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(kernelNode(t, w, "node_add1"), mkArgs(ref, engine.InOut), nil, 0)
		return err
	})
	// A kernel that heeds no stop: the session is ended within its grace.
	r = enginetest.Must(w.Submit(asBuild(func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(node("hang"), mkArgs(ref, engine.OutputExisting), nil, 0)
		return err
	})))
	time.Sleep(50 * time.Millisecond)
	start = time.Now()
	r.Cancel()
	if err := r.Wait(10 * time.Second); !r.Done() || !strings.Contains(fmt.Sprint(err), "cancelled") {
		t.Errorf("a remote task that will not stop: %v", err)
	}
	if el := time.Since(start); el > 4*time.Second {
		t.Errorf("ending the node took %v", el)
	}
	if lost := nodeOf(w, 0).Lost(); lost == nil || !strings.Contains(lost.Error(), "did not stop a task") {
		t.Errorf("the node after a kernel that would not stop: %v", lost)
	}
}

func kernelNode(t *testing.T, w *engine.Worker, name string) *engine.Handle {
	h, ok := w.Registry().Lookup(nodeOrch{procKernel{name}}.Digest())
	if !ok {
		t.Fatalf("%s not registered", name)
	}
	return h
}
