package race

import (
	"slices"
	"sort"
)

// access is one recorded access: who made it, at which of its epochs,
// what it did to which bytes, and from where.
type access struct {
	ctx    *Ctx
	clk    uint32
	kind   Kind
	lo, hi uintptr
	op     string
	st     Stack
}

// seg is a run of bytes [lo, hi) with one history: the last write, the
// reads since it (and atomic writes not ordered with the last), and whether anything wrote the bytes since they were
// named unwritten. Accesses are pointers shared by every segment they
// cover; a segment's reads slice is never changed in place, so segments
// split from one another can share it.
type seg struct {
	lo, hi  uintptr
	w       *access
	reads   []*access
	written bool
}

// addRead is the reads after read a, dropping the reads it supersedes: those by
// the same context and those that happen before a (a later write that is
// ordered after a is ordered after them too).
func (g *seg) addRead(a *access, c *Ctx) []*access {
	out := make([]*access, 0, len(g.reads)+1)
	for _, r := range g.reads {
		if r.kind.writes() || r.ctx != c && !(c.hb(r) && r.kind == a.kind) {
			out = append(out, r)
		}
	}
	return append(out, a)
}

// sameHistory reports whether two adjacent segments can be one.
func sameHistory(a, b *seg) bool {
	return a.hi == b.lo && a.w == b.w && a.written == b.written && slices.Equal(a.reads, b.reads)
}

// shadow is the history of every byte accessed, as sorted disjoint
// segments. Whole-tensor accesses, the common case, touch one segment
// or a few.
type shadow struct {
	segs []seg
}

// cover splits segments so that [lo, hi) is exactly segs[i:j], filling the
// gaps with segments that have no history (and count as written: only
// named heap memory starts unwritten).
func (s *shadow) cover(lo, hi uintptr) (i, j int) {
	i = sort.Search(len(s.segs), func(k int) bool { return s.segs[k].hi > lo })
	k := i
	var mid []seg
	if k < len(s.segs) && s.segs[k].lo < lo { // split the first: keep its head
		head := s.segs[k]
		head.hi = lo
		mid = append(mid, head)
	}
	first := len(mid)
	for p := lo; p < hi; {
		if k < len(s.segs) && s.segs[k].lo <= p {
			g := s.segs[k]
			g.lo, g.hi = p, min(g.hi, hi)
			mid = append(mid, g)
			p = g.hi
			k++
			continue
		}
		end := hi
		if k < len(s.segs) && s.segs[k].lo < hi {
			end = s.segs[k].lo
		}
		mid = append(mid, seg{lo: p, hi: end, written: true})
		p = end
	}
	last := len(mid)
	if k > 0 && k-1 >= i && s.segs[k-1].hi > hi { // the last one went past hi: keep its tail
		tail := s.segs[k-1]
		tail.lo = hi
		mid = append(mid, tail)
	}
	s.segs = slices.Replace(s.segs, i, k, mid...)
	return i + first, i + last
}

// coalesce merges segments around segs[i:j] that have one history.
func (s *shadow) coalesce(i, j int) {
	lo, hi := max(i-1, 0), min(j+1, len(s.segs))
	out := s.segs[lo:lo]
	for k := lo; k < hi; k++ {
		if n := len(out); n > 0 && sameHistory(&out[n-1], &s.segs[k]) {
			out[n-1].hi = s.segs[k].hi
			continue
		}
		out = append(out, s.segs[k])
	}
	s.segs = slices.Delete(s.segs, lo+len(out), hi)
}

// markUnwritten makes [lo, hi) a fresh, never-written run of bytes.
func (s *shadow) markUnwritten(lo, hi uintptr) {
	i, j := s.cover(lo, hi)
	s.segs = slices.Replace(s.segs, i, j, seg{lo: lo, hi: hi})
}

// forget drops the history of [lo, hi).
func (s *shadow) forget(lo, hi uintptr) {
	i, j := s.cover(lo, hi)
	s.segs = slices.Delete(s.segs, i, j)
}

// forgetHistory drops every access, keeping only which bytes are still
// unwritten.
func (s *shadow) forgetHistory() {
	out := s.segs[:0]
	for _, g := range s.segs {
		if g.written {
			continue // no history and written: the same as no segment
		}
		if n := len(out); n > 0 && out[n-1].hi == g.lo {
			out[n-1].hi = g.hi
			continue
		}
		out = append(out, seg{lo: g.lo, hi: g.hi})
	}
	clear(s.segs[len(out):])
	s.segs = out
}
