package comm

import (
	"slices"
	"strings"
	"testing"

	"simpler/hal/shm"
)

// RemoveGlobalRank removes exactly the names of one rank of one
// generation of a domain under one prefix: its window, and for rank 0 the
// header; never another rank's, another generation's, another prefix's,
// or a name of another shape.
func TestRemoveGlobalRankRemovesOnlyThatRank(t *testing.T) {
	prefix := shm.Prefix() + "w1-"
	key := strings.Repeat("ab", globalKeyLen/2)
	other := strings.Repeat("cd", globalKeyLen/2)
	names := map[string]bool{ // name → removed for rank 0
		prefix + "gdom-1f-2-" + key + "-r0":                  true,
		prefix + "gdom-1f-2-" + key + "-hdr":                 true,
		prefix + "gdom-1f-2-" + other + "-r0":                true, // a second attempt the dead process made
		prefix + "gdom-1f-2-" + key + "-r1":                  false,
		prefix + "gdom-1f-2-" + key + "-r10":                 false,
		prefix + "gdom-1f-3-" + key + "-r0":                  false,
		prefix + "gdom-1f-2-short-r0":                        false,
		shm.Prefix() + "w2-gdom-1f-2-" + key + "-r0":         false,
		prefix + "gdom-1f-2-" + strings.ToUpper(key) + "-r0": false,
	}
	var segs []*shm.Segment
	for name := range names {
		seg, err := shm.CreateNamed(name, 64)
		if err != nil {
			t.Fatal(err)
		}
		segs = append(segs, seg)
	}
	t.Cleanup(func() {
		for _, s := range segs {
			s.Unlink()
			s.Close()
		}
	})
	if err := RemoveGlobalRank(prefix, 0x1f, 2, 0); err != nil {
		t.Fatal(err)
	}
	left, err := shm.Leftovers(shm.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	for name, removed := range names {
		if slices.Contains(left, name) == removed {
			t.Errorf("%s: removed %v, want %v", name, !removed, removed)
		}
	}
	if err := RemoveGlobalRank(prefix, 0x1f, 2, 0); err != nil {
		t.Errorf("a second removal: %v", err)
	}
	if err := RemoveGlobalRank("other-", 0x1f, 2, 0); err == nil || !strings.Contains(err.Error(), "must start with") {
		t.Errorf("a bad prefix: %v", err)
	}
}
