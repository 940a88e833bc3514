package engine

import (
	"strings"
	"testing"
)

// A worker that needs child processes and has no Spawner (engine starts
// no process itself; engine/proc does) is refused at init with a
// RuntimeError naming what is missing, before anything starts; one that
// needs none does not need a Spawner.
func TestProcessesNeedASpawner(t *testing.T) {
	const want = `init: this mode="process" worker has no transport for child processes (Config.Spawn is nil; set it to proc.Spawner{} of package simpler/engine/proc)`
	launcher := &Launcher{Path: "/nonexistent/simpler"} // never run: nothing may start
	l3 := must(NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0}, NumSubWorkers: 1, Mode: "process", Launcher: launcher}))
	defer l3.Close()
	if err := l3.Init(); KindOf(err) != RuntimeError || err.Error() != "RuntimeError: "+want {
		t.Errorf("a level-3 worker without a spawner: %v", err)
	}
	l2 := must(NewWorker(Config{Level: 2, Platform: sim(t), DeviceIDs: []int{0}, Mode: "process", Launcher: launcher}))
	defer l2.Close()
	if err := l2.Init(); KindOf(err) != RuntimeError || !strings.Contains(err.Error(), want) {
		t.Errorf("a level-2 worker without a spawner: %v", err)
	}
	l4 := must(NewWorker(Config{Level: 4, Platform: sim(t), Mode: "process", Launcher: launcher}))
	defer l4.Close()
	must(l4.AddWorker(must(NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0}}))))
	if err := l4.Init(); KindOf(err) != RuntimeError || !strings.Contains(err.Error(), want) {
		t.Errorf("a level-4 worker of a local node without a spawner: %v", err)
	}
	// Remote nodes only: no process to start, so the missing transport is
	// the dialer.
	r4 := must(NewWorker(Config{Level: 4, Platform: sim(t), Mode: "process", Launcher: launcher}))
	defer r4.Close()
	must(r4.AddRemoteWorker(RemoteSpec{Endpoint: "127.0.0.1:7700", Platform: "a2a3sim", DeviceIDs: []int{0}, Token: []byte("0123456789abcdef")}))
	if err := r4.Init(); KindOf(err) != RuntimeError || !strings.Contains(err.Error(), "Config.Dial is nil") {
		t.Errorf("a level-4 worker of remote nodes only: %v", err)
	}
	// A level-5 worker composes its children in this process.
	l5 := must(NewWorker(Config{Level: 5, Platform: sim(t), Mode: "process", Launcher: launcher}))
	defer l5.Close()
	l4b := must(NewWorker(Config{Level: 4, Platform: sim(t)}))
	must(l4b.AddWorker(must(NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{1}}))))
	must(l5.AddWorker(l4b))
	if err := l5.Init(); err != nil {
		t.Errorf("a level-5 worker over thread-mode children: %v", err)
	}
}
