package core

import (
	"errors"
	"testing"
)

// Strided views whose tasks all retired cleanly are dropped once a space
// holds several; one whose writer failed stays, and poisons a later
// reader.
func TestIdleStridedViewsAreDropped(t *testing.T) {
	c := New(Config{Next: 1})
	r := &Run{}
	c.Begin(r, 1, false)
	host := SpaceKey{Space: -1}
	// column block k of a 16-column int32 matrix, 4 rows from row r0
	block := func(r0, col, cols int) Layout {
		return Layout{Addr: uint64(4 * (r0*16 + col)), Elem: uint64(4 * cols), Dims: []Dim{{N: 4, Stride: 64}}}
	}
	add := func(l Layout, reads, writes bool) *Task {
		tk := &Task{}
		c.Submit(r, tk, Job{Pool: NextLevel}, 1)
		r.AccessStrided(tk, host, l, reads, writes)
		return tk
	}
	failed := add(block(0, 0, 2), false, true)
	failed.done, failed.err = true, errors.New("kernel failed")
	for col := 2; col < 16; col += 2 {
		add(block(0, col, 2), false, true).done = true
	}
	add(block(4, 0, 16), true, false) // another layout: the prune runs
	if n := len(r.spaces[host].strided); n != 2 {
		t.Errorf("%d strided views kept, want the failed writer's and the reader's", n)
	}
	if rd := add(block(0, 0, 16), true, false); rd.poison == nil || rd.pending != 0 {
		t.Errorf("a reader after a failed writer: poison %v, pending %d", rd.poison, rd.pending)
	}
}

// A contiguous range against strided rows: exact, row by row.
func TestLayoutTouches(t *testing.T) {
	rows := Layout{Addr: 0, Elem: 16, Dims: []Dim{{N: 8, Stride: 32}}}
	cases := []struct {
		lo, hi uint64
		want   bool
	}{
		{0, 1, true}, {16, 32, false}, {31, 33, true}, {240, 256, false}, {224, 240, true}, {256, 300, false},
	}
	for _, c := range cases {
		if got := rows.touches(c.lo, c.hi); got != c.want {
			t.Errorf("[%d, %d): touches = %v, want %v", c.lo, c.hi, got, c.want)
		}
		if got := Overlaps(rows, Layout{Addr: c.lo, Elem: c.hi - c.lo}); got != c.want {
			t.Errorf("[%d, %d): Overlaps = %v, want %v", c.lo, c.hi, got, c.want)
		}
	}
}
