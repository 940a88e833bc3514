package hostmem

import "sort"

// span is a run of free bytes in a chunk: [off, off+n).
type span struct{ off, n int }

// freeList is the free space of one chunk, a plain data structure with no
// locking or memory of its own, so that tests can step it directly. Spans
// are sorted by offset and never touch: give merges a freed run with the
// free spans on either side, so a chunk whose allocations are all freed
// is one span again. take is first fit: the lowest offset that holds n
// bytes, which keeps live data packed at the low end of a chunk.
type freeList struct {
	size  int
	spans []span
}

// newFreeList is the free list of an empty chunk of size bytes.
func newFreeList(size int) freeList {
	return freeList{size: size, spans: []span{{0, size}}}
}

// take finds n bytes, returning their offset, or false if no span holds
// them.
func (f *freeList) take(n int) (int, bool) {
	for i, s := range f.spans {
		if s.n < n {
			continue
		}
		if s.n == n {
			f.spans = append(f.spans[:i], f.spans[i+1:]...)
		} else {
			f.spans[i] = span{s.off + n, s.n - n}
		}
		return s.off, true
	}
	return 0, false
}

// give returns [off, off+n), which take handed out, merging it with its
// neighbours.
func (f *freeList) give(off, n int) {
	i := sort.Search(len(f.spans), func(i int) bool { return f.spans[i].off > off })
	joinsLeft := i > 0 && f.spans[i-1].off+f.spans[i-1].n == off
	joinsRight := i < len(f.spans) && off+n == f.spans[i].off
	switch {
	case joinsLeft && joinsRight:
		f.spans[i-1].n += n + f.spans[i].n
		f.spans = append(f.spans[:i], f.spans[i+1:]...)
	case joinsLeft:
		f.spans[i-1].n += n
	case joinsRight:
		f.spans[i] = span{off, n + f.spans[i].n}
	default:
		f.spans = append(f.spans, span{})
		copy(f.spans[i+1:], f.spans[i:])
		f.spans[i] = span{off, n}
	}
}

// empty reports whether nothing in the chunk is allocated.
func (f *freeList) empty() bool {
	return len(f.spans) == 1 && f.spans[0].n == f.size
}

// free is the number of free bytes.
func (f *freeList) free() int {
	n := 0
	for _, s := range f.spans {
		n += s.n
	}
	return n
}
