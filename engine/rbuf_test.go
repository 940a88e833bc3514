package engine

import (
	"strings"
	"testing"
)

// freeOf is the owner free among acts, or nil.
func freeOf(acts []RemoteAction) *RemoteBuffer {
	for _, a := range acts {
		if a.Free != nil {
			return a.Free
		}
	}
	return nil
}

// The registry stepped by hand: a free that fails leaves the owner handle
// live, and freeing it again issues the free anew; a free that succeeded
// stays done and a second release is a no-op.
func TestRemoteFreeFailureLeavesTheHandleLive(t *testing.T) {
	h := &RemoteBuffer{Worker: 1, Owner: 1, BufferID: 7, Gen: 1, NBytes: 64, Access: AccessRW}
	acts := release(h)
	if freeOf(acts) != h || !h.Released() || !h.done {
		t.Fatalf("release of an idle owner: acts %v, released %v, done %v", acts, h.Released(), h.done)
	}
	if !failed(acts[0]) {
		t.Fatal("failed did not undo an issued free")
	}
	if h.Released() || h.done {
		t.Fatalf("after a failed free: released %v, done %v; want a live handle", h.Released(), h.done)
	}
	if failed(acts[0]) {
		t.Error("failed undid a free that was not issued")
	}
	acts = release(h) // the retry
	if freeOf(acts) != h || !h.Released() || !h.done {
		t.Fatalf("retrying the free: acts %v, released %v, done %v", acts, h.Released(), h.done)
	}
	if again := release(h); len(again) != 0 {
		t.Errorf("a release after a free that went ahead: %v, want none", again)
	}
}

// A failed free that had waited for a slot ref (issued at the fence) is
// undone the same way; an import release is never undone, since its
// owner's free may have followed it.
func TestRemoteFreeFailureAfterDeferral(t *testing.T) {
	h := &RemoteBuffer{Worker: 1, Owner: 1, NBytes: 8, Access: AccessRW}
	capture(h)
	if acts := release(h); len(acts) != 0 || !h.Released() || h.done {
		t.Fatalf("release while a task holds it: acts %v, done %v", acts, h.done)
	}
	acts := drop(h)
	if freeOf(acts) != h || !failed(acts[0]) || h.Released() {
		t.Fatalf("the fence's free, failed: acts %v, released %v", acts, h.Released())
	}
	if acts := release(h); freeOf(acts) != h {
		t.Errorf("retry after the fence: %v", acts)
	}

	owner := &RemoteBuffer{Worker: 0, Owner: 0, NBytes: 8, Access: AccessRW}
	view := &RemoteBuffer{Worker: 1, Owner: 0, ImportID: 3, NBytes: 8, Access: AccessRW}
	importFrom(owner, view)
	acts = release(view)
	if len(acts) != 1 || acts[0].ReleaseImport != view {
		t.Fatalf("releasing an import: %v", acts)
	}
	if failed(acts[0]) || failed(RemoteAction{Free: view}) || !view.Released() {
		t.Errorf("an import release was undone (released %v)", view.Released())
	}
}

// An owner's free waits for every slot ref and every import; an import's
// release waits for its own slot refs, and letting the last import go
// lets a released owner go with it, in that order.
func TestRemoteRegistryDefersFrees(t *testing.T) {
	owner := &RemoteBuffer{Worker: 0, Owner: 0, BufferID: 1, Gen: 1, NBytes: 16, Access: AccessRW}
	view := &RemoteBuffer{Worker: 1, Owner: 0, ImportID: 2, NBytes: 16, Access: AccessRW}
	importFrom(owner, view)
	capture(owner)
	capture(view)
	if acts := release(owner); len(acts) != 0 {
		t.Fatalf("owner released with a slot ref and an import: %v", acts)
	}
	if acts := drop(owner); len(acts) != 0 {
		t.Fatalf("owner's slot ref dropped, import still live: %v", acts)
	}
	if acts := release(view); len(acts) != 0 {
		t.Fatalf("import released with a slot ref: %v", acts)
	}
	acts := drop(view)
	if len(acts) != 2 || acts[0].ReleaseImport != view || acts[1].Free != owner {
		t.Fatalf("the import's last slot ref: %v, want its release then the owner's free", acts)
	}
	if !owner.done || !view.done {
		t.Errorf("done: owner %v, view %v", owner.done, view.done)
	}
	if acts := release(owner); len(acts) != 0 {
		t.Errorf("a second release after the free: %v", acts)
	}
}

// RangeError names what is wrong with the numbers as given, near the top
// of uint64 too, and checkRange passes exactly the ranges that fit.
func TestRangeErrorNeverWraps(t *testing.T) {
	const top = ^uint64(0)
	for _, c := range []struct {
		off, n, size uint64
		want         string
	}{
		{top - 4, 8, 64, "op: offset 18446744073709551611 is not inside the 64-byte buffer (its last byte is at offset 63)"},
		{60, top, 64, "op: 18446744073709551615 bytes at offset 60 run 18446744073709551611 bytes past the end of the 64-byte buffer"},
		{0, 0, 64, "op: 0 bytes at offset 0: the range must hold at least one byte"},
		{0, 1, 0, "op: offset 0 is not inside the 0-byte buffer"},
	} {
		err := RangeError("op", c.off, c.n, c.size)
		if KindOf(err) != ValueError || err.Error() != "ValueError: "+c.want && !strings.HasPrefix(err.Error(), "ValueError: "+c.want) {
			t.Errorf("RangeError(%d, %d, %d) = %v, want %q", c.off, c.n, c.size, err, c.want)
		}
	}
	for off := -2; off < 6; off++ {
		for n := -2; n < 6; n++ {
			fits := off >= 0 && n > 0 && off+n <= 4
			if err := checkRange("op", off, n, 4); (err == nil) != fits {
				t.Errorf("checkRange(%d, %d, 4) = %v, want fits %v", off, n, err, fits)
			}
		}
	}
}
