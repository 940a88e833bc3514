package comm

import (
	"strings"
	"testing"

	"simpler/hal"
)

// Windows live in the simulator's shared range (one address per window
// for every chip that maps it), but only a member's chip resolves them: a
// chip outside the domain reaches neither a rank's window nor the
// header, and cannot Open a member's CommContext; after the release not
// even the members reach them.
func TestNonMemberChipCannotReachWindow(t *testing.T) {
	clean(t)
	chips := openChips(t, 3)
	ranks := mustAllocate(t, newReq(2, 4096), chips[:2])
	// Device 2, and a second device 0 (another node's, say) that sees
	// the shared range as rank 0's chip does: only membership keeps it
	// out.
	twin, err := chips[0].Platform().OpenChip(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { twin.Close() })
	for r, rk := range ranks {
		outsiders := []hal.Chip{chips[2]}
		if r == 0 {
			outsiders = append(outsiders, twin)
		}
		for j, base := range rk.Bases {
			if _, err := chips[r].Bytes(base, 8); err != nil {
				t.Fatalf("rank %d cannot reach rank %d's window: %v", r, j, err)
			}
			for _, o := range outsiders {
				_, err := o.Bytes(base, 8)
				if err == nil || !strings.Contains(err.Error(), "outside any live allocation") {
					t.Errorf("a non-member device %d reaches rank %d's window at %#x: %v", o.DeviceID(), j, base, err)
				}
				if err := o.CopyIn(base, []byte{1}); err == nil {
					t.Errorf("a non-member device %d writes rank %d's window", o.DeviceID(), j)
				}
			}
		}
		if _, err := Open(twin, rk.DeviceCtx); err == nil {
			t.Errorf("a non-member chip opens rank %d's CommContext", r)
		}
	}
	if hb := ranks[0].core.hdrBase; hb == 0 {
		t.Error("rank 0 maps no header")
	} else if _, err := twin.Bytes(hb, 8); err == nil {
		t.Error("a non-member chip reaches the header")
	}
	base := ranks[1].Bases[0]
	releaseAll(t, ranks)
	if _, err := chips[1].Bytes(base, 8); err == nil {
		t.Error("a released member still reaches the window")
	}
}
