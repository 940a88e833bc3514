package core

import (
	"slices"
	"sort"
)

// Dependencies are inferred over bytes, not start addresses, by the
// rules of upstream's tag table:
//
//   - a task that reads bytes (INPUT, INOUT) waits for every earlier task
//     of its run that wrote any of them (read-after-write);
//   - a task that only writes them (OUTPUT, OUTPUT_EXISTING) is
//     insert-only: it waits for no earlier reader (write-after-read) and
//     no earlier writer (write-after-write), and an INOUT waits for no
//     earlier reader;
//   - NO_DEP orders nothing.
//
// Worker(order_hazards=True) also orders write-after-read and
// write-after-write, which is stricter than upstream. Which pairs become
// edges is decided in one place, Run.order, so a tool that reports the
// pairs left unordered has one place to look.
//
// Disjoint views of one buffer stay independent, whatever start addresses
// they have, and a read of any overlapping bytes waits for every writer
// of them: upstream does the same for its local tensors (its remote
// tensors key on the exact start address).
//
// A run keeps one rangeMap per address space: host memory, each NEXT_LEVEL
// worker's device memory, and each remote allocation (owner, buffer,
// generation, ranges in the owner's allocation, so owner and imported views
// of a range are one). A rangeMap is a sorted slice of disjoint segments,
// each with its writers and the tasks that read it since the last write:
// finding the segments of a range is a binary search, and the common
// accesses (the same range again, or ranges in increasing order) change
// the slice in place or at its end. Strided views (layout.go) are kept
// beside the segments, each with its layout: one is compared with a
// segment by whether its rows meet the segment's bytes, and with another
// strided view by bounding range first, then per dimension.

// order decides whether t, which touches bytes an earlier task p touched,
// waits for p: a read after a write always does; a write after a read or
// a write only under Worker(order_hazards=True). Every edge of dependency
// inference is made, or deliberately not made, here.
func (r *Run) order(t, p *Task, h Hazard) {
	if p == t {
		return
	}
	if r.edge != nil {
		r.edge(t, p, h)
	}
	if h != ReadAfterWrite && !r.ordered {
		return // upstream's insert-only writers: the pair runs unordered
	}
	t.dependOn(p)
}

// orderOn orders t, which reads and/or writes bytes of s, after the
// tasks that touched them before.
func (r *Run) orderOn(t *Task, s *segment, reads, writes bool) {
	h := WriteAfterWrite
	if reads {
		h = ReadAfterWrite
	}
	if s.writer != nil {
		r.order(t, s.writer, h)
	}
	for _, p := range s.unordered {
		r.order(t, p, h)
	}
	if writes {
		for _, p := range s.readers {
			r.order(t, p, WriteAfterRead)
		}
	}
}

// record makes t a reader of s, or its writer: a sole writer (one that
// waited for every earlier writer) replaces them, another keeps the last
// one among the writers it did not wait for. A write ends the readers.
func (s *segment) record(t *Task, writes, sole bool) {
	switch {
	case !writes:
		s.readers = appendLive(s.readers, t)
		return
	case sole:
		s.unordered = s.unordered[:0]
	case s.writer != nil && s.writer != t && !retiredClean(s.writer):
		s.unordered = appendLive(s.unordered, s.writer)
	}
	s.writer, s.readers = t, s.readers[:0]
}

// idle reports whether every task of s retired without failing: it
// orders nothing any more.
func (s *segment) idle() bool {
	return (s.writer == nil || retiredClean(s.writer)) &&
		!slices.ContainsFunc(s.unordered, func(t *Task) bool { return !retiredClean(t) }) &&
		!slices.ContainsFunc(s.readers, func(t *Task) bool { return !retiredClean(t) })
}

// sole reports whether a write of t waits for every earlier writer of its
// bytes: an INOUT always does (it reads them), any write under
// order_hazards.
func (r *Run) sole(reads, writes bool) bool {
	return writes && (reads || r.ordered)
}

// Access records that t reads and/or writes the contiguous [lo, hi) of
// space k: t is
// ordered after what touched it before (Run.order), then becomes one of
// its writers or readers.
func (r *Run) Access(t *Task, k SpaceKey, lo, hi uint64, reads, writes bool) {
	m := r.space(k)
	sole := r.sole(reads, writes)
	for k := range m.strided {
		v := &m.strided[k]
		if v.lo < hi && lo < v.hi && v.l.touches(lo, hi) {
			r.orderOn(t, &v.segment, reads, writes)
			if sole && lo <= v.lo && v.hi <= hi {
				v.supersede(r.ordered)
			}
		}
	}
	i, j := m.cover(lo, hi)
	for k := i; k < j; k++ {
		s := &m.segs[k]
		r.orderOn(t, s, reads, writes)
		s.record(t, writes, sole)
	}
	if sole {
		m.merge(i, j)
	}
}

// supersede forgets what a sole writer of all of v's bytes waited for:
// its writers, and under order_hazards its readers too. Later accesses of
// those bytes order through that writer.
func (v *stridedView) supersede(ordered bool) {
	v.writer, v.unordered = nil, v.unordered[:0]
	if ordered {
		v.readers = v.readers[:0]
	}
}

// AccessStrided records that t reads and/or writes the bytes of the
// strided layout l: t is ordered after the segments whose bytes its rows
// meet and the strided views that overlap it, then recorded in the view
// of its layout (segments are not split for it: its bytes are not one
// range).
func (r *Run) AccessStrided(t *Task, k SpaceKey, l Layout, reads, writes bool) {
	m := r.space(k)
	lo, hi := l.bound()
	i, j := m.overlap(lo, hi)
	for k := i; k < j; k++ {
		if s := &m.segs[k]; l.touches(s.lo, s.hi) {
			r.orderOn(t, s, reads, writes)
		}
	}
	mine := -1
	for k := range m.strided {
		v := &m.strided[k]
		switch {
		case v.lo >= hi || lo >= v.hi:
		case v.l.same(l):
			mine = k
			r.orderOn(t, &v.segment, reads, writes)
		case Overlaps(l, v.l):
			r.orderOn(t, &v.segment, reads, writes)
		}
	}
	if mine < 0 {
		if len(m.strided) >= 8 {
			m.strided = slices.DeleteFunc(m.strided, func(v stridedView) bool { return v.idle() })
		}
		m.strided = append(m.strided, stridedView{segment: segment{lo: lo, hi: hi}, l: l})
		mine = len(m.strided) - 1
	}
	m.strided[mine].record(t, writes, r.sole(reads, writes))
}

// overlap returns the segments [i, j) that overlap [lo, hi).
func (m *rangeMap) overlap(lo, hi uint64) (int, int) {
	i := sort.Search(len(m.segs), func(k int) bool { return m.segs[k].hi > lo })
	j := i
	for j < len(m.segs) && m.segs[j].lo < hi {
		j++
	}
	return i, j
}

// cover makes segments [i, j) cover exactly [lo, hi): a segment across
// either end is split there, and the gaps between segments get new,
// untouched ones.
func (m *rangeMap) cover(lo, hi uint64) (int, int) {
	i := sort.Search(len(m.segs), func(k int) bool { return m.segs[k].hi > lo })
	if i < len(m.segs) && m.segs[i].lo < lo {
		m.split(i, lo)
		i++
	}
	k, at := i, lo
	for at < hi {
		if k == len(m.segs) || m.segs[k].lo >= hi {
			m.segs = slices.Insert(m.segs, k, segment{lo: at, hi: hi})
			k++
			break
		}
		if s := m.segs[k]; s.lo > at {
			m.segs = slices.Insert(m.segs, k, segment{lo: at, hi: s.lo})
			k, at = k+1, s.lo
			continue
		}
		if m.segs[k].hi > hi {
			m.split(k, hi)
		}
		at = m.segs[k].hi
		k++
	}
	return i, k
}

// split cuts segment k at `at` (inside it) into two with the same
// writers and readers, each its own copy.
func (m *rangeMap) split(k int, at uint64) {
	right := m.segs[k]
	right.lo = at
	right.unordered, right.readers = slices.Clone(right.unordered), slices.Clone(right.readers)
	m.segs[k].hi = at
	m.segs = slices.Insert(m.segs, k+1, right)
}

// merge joins segments [i, j), which one sole writer has just covered,
// back into one.
func (m *rangeMap) merge(i, j int) {
	if j-i < 2 {
		return
	}
	m.segs[i].hi = m.segs[j-1].hi
	m.segs = slices.Delete(m.segs, i+1, j)
}

// appendLive adds t once, dropping tasks that retired without failing
// when the list grows: waiting for one is no wait, while a failed one
// still poisons whoever would have waited.
func appendLive(ts []*Task, t *Task) []*Task {
	if n := len(ts); n > 0 && ts[n-1] == t {
		return ts
	}
	if len(ts) >= 8 {
		ts = slices.DeleteFunc(ts, retiredClean)
	}
	return append(ts, t)
}

// retiredClean reports whether t retired without failing: waiting for it
// is no wait.
func retiredClean(t *Task) bool { return t.done && t.err == nil }

// space returns the run's range map of k, making it on first use.
func (r *Run) space(k SpaceKey) *rangeMap {
	m := r.spaces[k]
	if m == nil {
		m = &rangeMap{segs: make([]segment, 0, 4)} // a collective's tensors without growing
		r.spaces[k] = m
	}
	return m
}
