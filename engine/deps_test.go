package engine

import (
	"math/rand"
	"slices"
	"testing"

	"simpler/hal/dtype"
)

// depRun steps dependency inference directly: tasks are wired in order,
// none runs.
type depRun struct {
	r     *Run
	tasks []*Task
}

func newDepRun() *depRun {
	return &depRun{r: &Run{w: &Worker{}, spaces: map[spaceKey]*rangeMap{}}}
}

// add wires a task with the given tensors and tags on NEXT_LEVEL worker 0.
func (d *depRun) add(args ...any) *Task {
	t := &Task{ID: len(d.tasks) + 1, run: d.r, job: schedJob{pool: NextLevel, worker: 0}}
	t.args = []TaskArgs{*mkArgs(args...)}
	d.r.wire(t)
	d.tasks = append(d.tasks, t)
	return t
}

// producers are the tasks t waits on, by id.
func (d *depRun) producers(t *Task) []int {
	var ids []int
	for _, p := range d.tasks {
		if slices.Contains(p.consumers, t) {
			ids = append(ids, p.ID)
		}
	}
	return ids
}

// view is n int32 elements at byte offset off of host memory at base.
func view(off, n int) Tensor {
	return Tensor{Addr: 0x10000 + uint64(off), Shape: []int{n}, DType: dtype.Int32}
}

func TestRangeDependencies(t *testing.T) {
	cases := []struct {
		name  string
		steps [][]any // each: tensor, tag pairs of one task
		want  [][]int // producers of each task
	}{
		{"overlapping views at other starts", [][]any{{view(0, 4), Output}, {view(8, 4), Input}}, [][]int{nil, {1}}},
		{"disjoint views stay independent", [][]any{{view(0, 2), Output}, {view(8, 2), Input}, {view(8, 2), Output}}, [][]int{nil, nil, {2}}},
		{"write after read", [][]any{{view(0, 4), Input}, {view(4, 1), Output}}, [][]int{nil, {1}}},
		{"write after write", [][]any{{view(0, 4), Output}, {view(8, 4), OutputExisting}}, [][]int{nil, {1}}},
		{"a read over two writers", [][]any{{view(0, 2), Output}, {view(8, 2), Output}, {view(0, 4), Input}}, [][]int{nil, nil, {1, 2}}},
		{"a write waits for every reader since", [][]any{{view(0, 4), Output}, {view(0, 2), Input}, {view(8, 2), Input}, {view(4, 2), InOut}},
			[][]int{nil, {1}, {1}, {1, 2, 3}}},
		{"readers do not wait on each other", [][]any{{view(0, 4), Input}, {view(0, 4), Input}}, [][]int{nil, nil}},
		{"NO_DEP opts out", [][]any{{view(0, 4), Output}, {view(0, 4), NoDep}, {view(0, 4), Input}}, [][]int{nil, nil, {1}}},
		{"an empty tensor orders at its address", [][]any{{view(0, 0), Output}, {view(0, 0), Input}}, [][]int{nil, {1}}},
		{"the writer replaces what it covers", [][]any{{view(0, 4), Output}, {view(0, 4), Output}, {view(4, 2), Input}}, [][]int{nil, {1}, {2}}},
	}
	for _, c := range cases {
		d := newDepRun()
		for i, step := range c.steps {
			tk := d.add(step...)
			if got := d.producers(tk); !slices.Equal(got, c.want[i]) {
				t.Errorf("%s: task %d waits on %v, want %v", c.name, i+1, got, c.want[i])
			}
		}
	}
}

// Remote ranges are ordered within one owner allocation and generation.
func TestRemoteRangeDependencies(t *testing.T) {
	d := newDepRun()
	buf := &RemoteBuffer{Worker: 0, Owner: 0, BufferID: 3, Gen: 1, NBytes: 64, Access: AccessRW}
	imported := &RemoteBuffer{Worker: 0, Owner: 0, BufferID: 3, Gen: 1, NBytes: 32, Offset: 16, ImportID: 9, Access: AccessRW}
	later := &RemoteBuffer{Worker: 0, Owner: 0, BufferID: 3, Gen: 2, NBytes: 64, Access: AccessRW}
	rt := func(b *RemoteBuffer, off, n int) Tensor {
		return Tensor{Shape: []int{n}, DType: dtype.UInt8, Remote: &RemoteRef{Buf: b, Offset: off}}
	}
	w := d.add(rt(buf, 0, 24), Output)
	if p := d.producers(d.add(rt(imported, 0, 4), Input)); !slices.Equal(p, []int{w.ID}) {
		t.Errorf("an imported view of bytes 16..20 waits on %v", p)
	}
	if p := d.producers(d.add(rt(imported, 8, 4), Input)); p != nil {
		t.Errorf("an imported view past the write waits on %v", p)
	}
	if p := d.producers(d.add(rt(later, 0, 8), Input)); p != nil {
		t.Errorf("another generation waits on %v", p)
	}
}

// Against a brute-force model on random accesses: every dependency is a
// conflict (overlapping bytes, at least one side writing), and every
// conflict between two tasks is ordered, directly or through others.
func TestRangeDependenciesModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for trial := range 200 {
		d := newDepRun()
		type acc struct {
			lo, hi int
			write  bool
		}
		var accs []acc
		for range 30 {
			off, n := rng.Intn(16)*4, 1+rng.Intn(6)
			tag := []Tag{Input, Output, InOut, OutputExisting}[rng.Intn(4)]
			d.add(view(off, n), tag)
			accs = append(accs, acc{off, off + 4*n, tag.Writes()})
		}
		conflict := func(a, b acc) bool { return a.lo < b.hi && b.lo < a.hi && (a.write || b.write) }
		for i, tk := range d.tasks {
			for _, p := range d.producers(tk) {
				if !conflict(accs[p-1], accs[i]) {
					t.Fatalf("trial %d: task %d waits on %d without a conflict (%v, %v)", trial, i+1, p, accs[p-1], accs[i])
				}
			}
			for j := range i {
				if conflict(accs[j], accs[i]) && !reaches(d, tk, d.tasks[j]) {
					t.Fatalf("trial %d: tasks %d and %d conflict (%v, %v) and are not ordered", trial, j+1, i+1, accs[j], accs[i])
				}
			}
		}
	}
}

// reaches reports whether t waits on p, directly or through others.
func reaches(d *depRun, t, p *Task) bool {
	for _, q := range d.producers(t) {
		if q == p.ID || reaches(d, d.tasks[q-1], p) {
			return true
		}
	}
	return false
}
