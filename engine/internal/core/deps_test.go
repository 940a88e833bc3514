package core

import (
	"errors"
	"math/rand"
	"slices"
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

// Against a brute-force model on random accesses of contiguous ranges and
// strided blocks of an 8x8 int32 matrix, under both tag rules, stepping
// the dependency map directly: every edge is a conflict (shared bytes; a
// read after a write, or under order_hazards any pair with a write), and
// every conflict between two tasks is ordered, directly or through others.
func TestDependencyModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	host := SpaceKey{Space: -1}
	for trial := range 200 {
		ordered := trial%2 == 1
		c := New(Config{Next: 1, OrderHazards: ordered})
		r := &Run{}
		c.Begin(r, 1, false)
		type access struct {
			bytes         map[uint64]bool
			reads, writes bool
		}
		var tasks []*Task
		var accs []access
		for range 30 {
			var l Layout
			if rng.Intn(2) == 0 {
				off, n := rng.Intn(16)*4, 1+rng.Intn(6)
				if rng.Intn(4) == 0 { // most of the matrix: it covers blocks whole
					off, n = rng.Intn(4)*4, 40+rng.Intn(20)
				}
				l = Layout{Addr: uint64(off), Elem: uint64(4 * n)}
			} else {
				r0, c0 := rng.Intn(7), rng.Intn(7)
				rows, cols := 2+rng.Intn(7-r0), 2+rng.Intn(7-c0)
				l = Layout{Addr: uint64(4 * (r0*8 + c0)), Elem: 4, Dims: []Dim{{N: uint64(rows), Stride: 32}, {N: uint64(cols), Stride: 4}}}
			}
			var reads, writes bool
			switch rng.Intn(3) {
			case 0:
				reads, writes = true, false
			case 1:
				reads, writes = false, true
			default:
				reads, writes = true, true
			}
			tk := &Task{}
			c.Submit(r, tk, Job{Pool: NextLevel}, 1)
			if l.Dims == nil {
				r.Access(tk, host, l.Addr, l.Addr+l.Elem, reads, writes)
			} else {
				r.AccessStrided(tk, host, l, reads, writes)
			}
			tasks = append(tasks, tk)
			accs = append(accs, access{layoutBytes(l), reads, writes})
		}
		conflict := func(a, b access) bool { // a earlier than b
			shared := false
			for x := range a.bytes {
				shared = shared || b.bytes[x]
			}
			if ordered {
				return shared && (a.writes || b.writes)
			}
			return shared && a.writes && b.reads
		}
		for j, p := range tasks {
			for _, k := range p.consumers {
				if !conflict(accs[j], accs[k.id-1]) {
					t.Fatalf("trial %d: task %d waits on %d without a conflict", trial, k.id, j+1)
				}
			}
		}
		for i := range tasks {
			for j := range i {
				if conflict(accs[j], accs[i]) && !waitsOn(tasks[i], tasks[j], tasks) {
					t.Fatalf("trial %d: tasks %d and %d conflict and are not ordered", trial, j+1, i+1)
				}
			}
		}
	}
}

// layoutBytes is every byte address of l.
func layoutBytes(l Layout) map[uint64]bool {
	set := map[uint64]bool{}
	var walk func(base uint64, dims []Dim)
	walk = func(base uint64, dims []Dim) {
		if len(dims) == 0 {
			for b := range l.Elem {
				set[base+b] = true
			}
			return
		}
		for k := range dims[0].N {
			walk(base+k*dims[0].Stride, dims[1:])
		}
	}
	walk(l.Addr, l.Dims)
	return set
}

// waitsOn reports whether t waits on p, directly or through others: a walk
// back from t over each task's producers (the tasks it is a consumer of).
func waitsOn(t, p *Task, all []*Task) bool {
	seen := map[*Task]bool{}
	stack := []*Task{t}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, q := range all {
			if seen[q] || !slices.Contains(q.consumers, x) {
				continue
			}
			if q == p {
				return true
			}
			seen[q] = true
			stack = append(stack, q)
		}
	}
	return false
}
