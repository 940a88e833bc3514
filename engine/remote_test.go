package engine

import (
	"strings"
	"testing"
)

// engine has no transport of its own for remote nodes: a worker whose
// Config.Dial is nil refuses them at init, naming the node and the fix,
// before anything is dialled. (The TCP transport and its tests are
// engine/remote's.)
func TestRemoteNodesNeedADialer(t *testing.T) {
	w := must(NewWorker(Config{Level: 4, Platform: sim(t)}))
	defer w.Close()
	must(w.AddRemoteWorker(RemoteSpec{Endpoint: "127.0.0.1:7700", Platform: "a2a3sim", DeviceIDs: []int{0}, Token: []byte("0123456789abcdef")}))
	err := w.Init()
	if KindOf(err) != RuntimeError || !strings.Contains(err.Error(), "remote_worker 0: this worker has no transport for remote nodes (Config.Dial is nil") {
		t.Fatalf("init without a dialer: %v", err)
	}
}
