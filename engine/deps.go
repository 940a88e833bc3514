package engine

import (
	"slices"
	"sort"
)

// Dependencies are inferred over byte ranges, not start addresses: a task
// that reads bytes an earlier task of its run writes waits for it, a task
// that writes bytes waits for every earlier reader and writer of them, and
// disjoint views of one buffer stay independent, whatever start addresses
// the views have. (Upstream keys on the exact start address; two views of
// one array at different offsets then race, or deadlock a rendezvous.)
//
// A run keeps one rangeMap per address space: host memory, each NEXT_LEVEL
// worker's device memory, and each remote allocation (owner, buffer,
// generation, ranges in the owner's allocation, so owner and imported views
// of a range are one). A rangeMap is a sorted slice of disjoint segments,
// each with the last task that wrote it and the tasks that read it since:
// finding the segments of a range is a binary search, and the common
// accesses (the same range again, or ranges in increasing order) change
// the slice in place or at its end.

// spaceKey names one address space of a run.
type spaceKey struct {
	space    int // -1 host, a NEXT_LEVEL worker id, or remoteSpace
	owner    int
	buf, gen uint64
}

const remoteSpace = -2

// segment is [lo, hi) of one space: its last writer and the readers since.
type segment struct {
	lo, hi  uint64
	writer  *Task
	readers []*Task
}

// rangeMap is one space's segments, sorted by lo and disjoint.
type rangeMap struct {
	segs []segment
}

// access records that t reads and/or writes [lo, hi): t depends on every
// overlapping writer, and a writer also on every overlapping reader; then
// t becomes the writer of the range (if it writes) or one of its readers.
func (m *rangeMap) access(t *Task, lo, hi uint64, reads, writes bool) {
	i, j := m.overlap(lo, hi)
	for k := i; k < j; k++ {
		s := &m.segs[k]
		if s.writer != nil && s.writer != t {
			t.dependOn(s.writer)
		}
		if writes {
			for _, rd := range s.readers {
				if rd != t {
					t.dependOn(rd)
				}
			}
		}
	}
	switch {
	case i == j && (reads || writes): // untouched bytes: one new segment, the common case
		s := segment{lo: lo, hi: hi}
		if writes {
			s.writer = t
		} else {
			s.readers = []*Task{t}
		}
		m.segs = slices.Insert(m.segs, i, s)
	case writes:
		m.setWriter(i, j, lo, hi, t)
	case reads:
		m.addReader(i, j, lo, hi, t)
	}
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

// setWriter makes t the only owner of [lo, hi): what segments i..j-1 held
// outside it stays as it was.
func (m *rangeMap) setWriter(i, j int, lo, hi uint64, t *Task) {
	if j == i+1 && m.segs[i].lo == lo && m.segs[i].hi == hi { // the same range again
		s := &m.segs[i]
		s.writer, s.readers = t, s.readers[:0]
		return
	}
	var repl []segment
	if i < j && m.segs[i].lo < lo {
		left := m.segs[i]
		left.hi, left.readers = lo, slices.Clone(left.readers)
		repl = append(repl, left)
	}
	repl = append(repl, segment{lo: lo, hi: hi, writer: t})
	if i < j && m.segs[j-1].hi > hi {
		right := m.segs[j-1]
		right.lo = hi
		repl = append(repl, right)
	}
	m.segs = slices.Replace(m.segs, i, j, repl...)
}

// addReader adds t to the readers of every byte of [lo, hi), splitting
// segments at its ends and filling the gaps between them.
func (m *rangeMap) addReader(i, j int, lo, hi uint64, t *Task) {
	if j == i+1 && m.segs[i].lo == lo && m.segs[i].hi == hi { // the same range again
		s := &m.segs[i]
		s.readers = appendReader(s.readers, t)
		return
	}
	var repl []segment
	at := lo
	for k := i; k < j; k++ {
		s := m.segs[k]
		if s.lo < at { // the part before lo keeps its readers
			left := s
			left.hi, left.readers = at, slices.Clone(s.readers)
			repl = append(repl, left)
			s.lo = at
		} else if s.lo > at { // a gap nobody touched yet
			repl = append(repl, segment{lo: at, hi: s.lo, readers: []*Task{t}})
		}
		if s.hi > hi { // the part after hi keeps its readers
			right := s
			right.lo, right.readers = hi, slices.Clone(s.readers)
			s.hi = hi
			s.readers = appendReader(s.readers, t)
			repl = append(repl, s, right)
			at = hi
			break
		}
		s.readers = appendReader(s.readers, t)
		repl = append(repl, s)
		at = s.hi
	}
	if at < hi {
		repl = append(repl, segment{lo: at, hi: hi, readers: []*Task{t}})
	}
	m.segs = slices.Replace(m.segs, i, j, repl...)
}

// appendReader adds t once, dropping readers that have retired when the
// list grows (a retired reader orders nothing).
func appendReader(rs []*Task, t *Task) []*Task {
	if n := len(rs); n > 0 && rs[n-1] == t {
		return rs
	}
	if len(rs) >= 8 {
		rs = slices.DeleteFunc(rs, func(r *Task) bool { return r.done })
	}
	return append(rs, t)
}

// wire records t's producers and makes t the writer or a reader of the
// bytes it touches. It runs under the Worker's mutex, in submit order.
func (r *Run) wire(t *Task) {
	for m := range t.args {
		a := &t.args[m]
		space := -1
		if t.job.pool == NextLevel {
			space = t.job.worker
			if t.job.group != nil {
				space = t.job.group[m]
			}
		}
		for i, ten := range a.Tensors {
			tag := a.Tags[i]
			if ten.Inline != nil || !tag.Reads() && !tag.Writes() {
				continue // carried in the frame, or NO_DEP: no memory to order on
			}
			k, lo := spaceKey{space: -1}, ten.Addr
			switch {
			case ten.Remote != nil:
				b := ten.Remote.Buf
				k = spaceKey{space: remoteSpace, owner: b.Owner, buf: b.BufferID, gen: b.Gen}
				lo = uint64(b.Offset + ten.Remote.Offset)
			case ten.ChildMemory:
				k.space = space
			}
			// A tensor of no bytes orders like one byte at its address, so
			// an empty tensor still serves as a dependency token.
			n, _ := tensorBytes(ten)
			hi := lo + uint64(max(n, 1))
			r.space(k).access(t, lo, hi, tag.Reads(), tag.Writes())
		}
	}
}

// space returns the run's range map of k, making it on first use.
func (r *Run) space(k spaceKey) *rangeMap {
	m := r.spaces[k]
	if m == nil {
		m = &rangeMap{segs: make([]segment, 0, 4)} // a collective's tensors without growing
		r.spaces[k] = m
	}
	return m
}
