package remote

import (
	"testing"
	"time"

	"simpler/engine"
	"simpler/internal/enginetest"
	"simpler/wire"
)

// BenchmarkRemoteNoop measures a run of one remote task whose node
// orchestration submits one no-op chip kernel.
func BenchmarkRemoteNoop(b *testing.B) {
	_, addr := startDaemon(b)
	w := enginetest.Must(newParent(engine.Config{Level: 4, Platform: sim(b), SessionTimeout: 5 * time.Second}))
	enginetest.Must(w.AddRemoteWorker(engine.RemoteSpec{Endpoint: addr, Platform: "a2a3sim", DeviceIDs: []int{0}}))
	node := nodeOrch{procKernel{"node_noop"}}
	w.Registry().Register(node, nil)
	w.Registry().Register(procKernel{"noop"}, nil)
	if err := w.Init(); err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	h, _ := w.Registry().Lookup(node.Digest())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, err := w.Run(func(o *engine.Orchestrator) (any, error) {
			_, err := o.SubmitNext(h, &engine.TaskArgs{}, nil, 0)
			return nil, err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRemoteControl measures one command round trip on the command
// lane (a RELEASE_DOMAIN of an unknown domain: the node does nothing).
func BenchmarkRemoteControl(b *testing.B) {
	_, addr := startDaemon(b)
	w := enginetest.Must(newParent(engine.Config{Level: 4, Platform: sim(b), SessionTimeout: 5 * time.Second}))
	enginetest.Must(w.AddRemoteWorker(engine.RemoteSpec{Endpoint: addr, Platform: "a2a3sim", DeviceIDs: []int{0}}))
	if err := w.Init(); err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	c := &wire.Control{Cmd: wire.CmdReleaseDomain, Domain: wire.Domain{ID: 1, Generation: 1}}
	n := nodeOf(w, 0)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := n.Control(c); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	reportMedian(b, lat)
}
