package remote

import (
	"strings"
	"testing"

	"simpler/internal/enginetest"
	"simpler/internal/fault"
)

// End to end on a real node: the remote.free fault point fails a free;
// Free leaves the handle live (copies still work), and the
// retry frees it.
func TestRemoteFreeCanBeRetried(t *testing.T) {
	_, ep := startDaemon(t)
	w := remoteWorker(t, ep)
	h := enginetest.Must(outside(w).Malloc(0, 16))
	if err := fault.Load("remote.free"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fault.Load("") })
	if err := Free(h); err == nil || !strings.Contains(err.Error(), "remote.free") {
		t.Fatalf("free with the fault armed: %v", err)
	}
	if h.Released() || Freed(h) {
		t.Fatalf("after the failed free: released %v, done %v; want a live handle", h.Released(), Freed(h))
	}
	if err := outside(w).CopyTo(h, make([]byte, 16), 0); err != nil {
		t.Fatalf("a copy into the live handle: %v", err)
	}
	if err := Free(h); err != nil || !h.Released() || !Freed(h) {
		t.Fatalf("retried free: %v (released %v, done %v)", err, h.Released(), Freed(h))
	}
	if err := outside(w).CopyTo(h, make([]byte, 16), 0); err == nil || !strings.Contains(err.Error(), "released") {
		t.Errorf("a copy after the free went ahead: %v", err)
	}
}
