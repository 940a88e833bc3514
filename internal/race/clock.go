package race

import "sort"

// A vclock is a sparse vector clock: for each context id, the last of
// its events this one has seen. Contexts are short-lived (one per task
// member) and their ids never reused, so a dense vector would grow with
// every task ever run; a sparse one holds only the contexts this one is
// ordered after since the detector's last quiescent point (Detector.Quiesce
// forgets the rest).
type vclock struct {
	ids  []uint32 // sorted
	clks []uint32
}

// get is c's component for id, 0 if it has none.
func (c *vclock) get(id uint32) uint32 {
	i := sort.Search(len(c.ids), func(i int) bool { return c.ids[i] >= id })
	if i < len(c.ids) && c.ids[i] == id {
		return c.clks[i]
	}
	return 0
}

// set makes c's component for id v.
func (c *vclock) set(id, v uint32) {
	i := sort.Search(len(c.ids), func(i int) bool { return c.ids[i] >= id })
	if i < len(c.ids) && c.ids[i] == id {
		c.clks[i] = v
		return
	}
	c.ids = append(c.ids, 0)
	c.clks = append(c.clks, 0)
	copy(c.ids[i+1:], c.ids[i:])
	copy(c.clks[i+1:], c.clks[i:])
	c.ids[i], c.clks[i] = id, v
}

// join makes c the componentwise maximum of c and o, by one merge of the
// two sorted lists.
func (c *vclock) join(o *vclock) {
	if len(o.ids) == 0 {
		return
	}
	ids := make([]uint32, 0, len(c.ids)+len(o.ids))
	clks := make([]uint32, 0, cap(ids))
	i, j := 0, 0
	for i < len(c.ids) || j < len(o.ids) {
		switch {
		case j == len(o.ids) || i < len(c.ids) && c.ids[i] < o.ids[j]:
			ids, clks = append(ids, c.ids[i]), append(clks, c.clks[i])
			i++
		case i == len(c.ids) || o.ids[j] < c.ids[i]:
			ids, clks = append(ids, o.ids[j]), append(clks, o.clks[j])
			j++
		default:
			ids, clks = append(ids, c.ids[i]), append(clks, max(c.clks[i], o.clks[j]))
			i++
			j++
		}
	}
	c.ids, c.clks = ids, clks
}

// copy is an independent copy of c.
func (c *vclock) copy() vclock {
	return vclock{ids: append([]uint32(nil), c.ids...), clks: append([]uint32(nil), c.clks...)}
}

// Clock is a frozen vector clock: what a context had seen when it made a
// release (ended, notified, submitted). Acquiring it orders what follows
// after everything it had seen. The zero Clock orders nothing.
type Clock struct{ vc vclock }

// Join returns the clock that has seen everything a and b have seen.
func Join(a, b Clock) Clock {
	c := a.vc.copy()
	c.join(&b.vc)
	return Clock{c}
}
