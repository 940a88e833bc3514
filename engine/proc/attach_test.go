package proc

import (
	"testing"

	"simpler/hal/shm"
)

// The child's mapping cache, stepped directly against real objects this
// test creates as a parent would: a mapping not in use whose object the
// parent unlinked goes at the next miss; one in use stays; past the
// limit the least recently used goes.
func TestMappingsDropReclaimed(t *testing.T) {
	ms := newMappings()
	defer ms.closeAll()
	create := func() *shm.Segment {
		seg, err := shm.Create("host", 4096)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { seg.Close() })
		return seg
	}
	acquire := func(seg *shm.Segment) *mapping {
		t.Helper()
		m, err := ms.acquire(hostRef{Name: seg.Name, Size: len(seg.Mem)})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b, c := create(), create(), create()
	ma := acquire(a)
	if again := acquire(a); again != ma || ma.uses != 2 {
		t.Fatalf("a second reference mapped again (%v) or did not count (%d uses)", again != ma, ma.uses)
	}
	ms.release([]*mapping{ma, ma})
	mb := acquire(b) // in use from here on
	a.Close()        // the parent reclaims both
	b.Close()
	if ms.count() != 2 {
		t.Fatalf("%d mappings before the next miss, want 2", ms.count())
	}
	acquire(c) // a miss: a's mapping goes, b's is in use and stays
	if ms.byName[a.Name] != nil || ms.byName[b.Name] != mb || ms.count() != 2 {
		t.Fatalf("after the miss: a mapped %v, b kept %v, %d mappings", ms.byName[a.Name] != nil, ms.byName[b.Name] == mb, ms.count())
	}
	ms.release([]*mapping{mb})
	d := create()
	acquire(d) // b is no longer in use: it goes now
	if ms.byName[b.Name] != nil || ms.count() != 2 {
		t.Fatalf("b's reclaimed mapping stayed after its use ended (%d mappings)", ms.count())
	}
	// The bound: with a limit of 2, a third object evicts the least
	// recently used mapping not in use (c: d was used since).
	ms.limit = 2
	ms.release([]*mapping{ms.byName[c.Name], ms.byName[d.Name]})
	acquire(c)
	acquire(d)
	ms.release([]*mapping{ms.byName[c.Name], ms.byName[d.Name]})
	e := create()
	acquire(e)
	if ms.byName[c.Name] != nil || ms.byName[d.Name] == nil || ms.count() != 2 {
		t.Fatalf("eviction at the bound: c mapped %v, d mapped %v, %d mappings", ms.byName[c.Name] != nil, ms.byName[d.Name] != nil, ms.count())
	}
}
