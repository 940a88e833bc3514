package engine

import (
	"math/rand"
	"slices"
	"testing"

	"simpler/engine/internal/core"
	"simpler/hal/dtype"
)

// depRun steps dependency inference directly: tasks are wired in order
// on a core, none runs.
type depRun struct {
	c     *core.Core
	r     *Run
	tasks []*Task
}

// newDepRun steps upstream's rules, or with ordered all hazards
// (Worker(order_hazards=True)).
func newDepRun(ordered bool) *depRun {
	d := &depRun{c: core.New(core.Config{Next: 2, OrderHazards: ordered}), r: &Run{}}
	d.c.Begin(&d.r.core, 1, true)
	return d
}

// add wires a task with the given tensors and tags on NEXT_LEVEL worker 0.
func (d *depRun) add(args ...any) *Task {
	return d.addOn(core.Job{Pool: NextLevel, Worker: 0}, mkArgs(args...))
}

// addOn wires a task of job with one member per args.
func (d *depRun) addOn(job core.Job, args ...*TaskArgs) *Task {
	t := &Task{}
	t.Payload = t
	for _, a := range args {
		t.args = append(t.args, *a)
	}
	d.c.Submit(&d.r.core, &t.Task, job, len(args))
	d.r.wire(t)
	d.tasks = append(d.tasks, t)
	return t
}

// producers are the tasks t waits on, by id: none has retired, so they
// are the producers its run observed.
func (d *depRun) producers(t *Task) []int {
	ids := slices.Clone(t.Deps())
	slices.Sort(ids)
	return slices.Compact(ids)
}

// view is n int32 elements at byte offset off of host memory at base.
func view(off, n int) Tensor {
	return Tensor{Addr: 0x10000 + uint64(off), Shape: []int{n}, DType: dtype.Int32}
}

// block is rows x cols int32 elements of a row-major matrix of width
// elements at 0x10000, from element (r0, c0).
func block(width, r0, c0, rows, cols int) Tensor {
	return Tensor{Addr: 0x10000 + uint64(4*(r0*width+c0)), Shape: []int{rows, cols}, Strides: []int{width, 1}, DType: dtype.Int32}
}

func TestRangeDependencies(t *testing.T) {
	cases := []struct {
		name    string
		steps   [][]any // each: tensor, tag pairs of one task
		want    [][]int // producers of each task, upstream's rules
		ordered [][]int // under order_hazards, when different
	}{
		{"overlapping views at other starts", [][]any{{view(0, 4), Output}, {view(8, 4), Input}}, [][]int{nil, {1}}, nil},
		{"disjoint views stay independent", [][]any{{view(0, 2), Output}, {view(8, 2), Input}, {view(8, 2), Output}}, [][]int{nil, nil, nil}, [][]int{nil, nil, {2}}},
		{"write after read", [][]any{{view(0, 4), Input}, {view(4, 1), Output}}, [][]int{nil, nil}, [][]int{nil, {1}}},
		{"write after write", [][]any{{view(0, 4), Output}, {view(8, 4), OutputExisting}}, [][]int{nil, nil}, [][]int{nil, {1}}},
		{"inout waits for the writer, not the readers", [][]any{{view(0, 4), Output}, {view(0, 4), Input}, {view(0, 4), InOut}}, [][]int{nil, {1}, {1}}, [][]int{nil, {1}, {1, 2}}},
		{"a read over two writers", [][]any{{view(0, 2), Output}, {view(8, 2), Output}, {view(0, 4), Input}}, [][]int{nil, nil, {1, 2}}, nil},
		{"a write waits for every reader since", [][]any{{view(0, 4), Output}, {view(0, 2), Input}, {view(8, 2), Input}, {view(4, 2), InOut}},
			[][]int{nil, {1}, {1}, {1}}, [][]int{nil, {1}, {1}, {1, 2, 3}}},
		{"readers do not wait on each other", [][]any{{view(0, 4), Input}, {view(0, 4), Input}}, [][]int{nil, nil}, nil},
		{"NO_DEP opts out", [][]any{{view(0, 4), Output}, {view(0, 4), NoDep}, {view(0, 4), Input}}, [][]int{nil, nil, {1}}, nil},
		{"an empty tensor orders at its address", [][]any{{view(0, 0), Output}, {view(0, 0), Input}}, [][]int{nil, {1}}, nil},
		// Upstream's insert-only OUTPUT does not wait for the writer before
		// it, so a reader waits for both; ordered, the second replaces the
		// first.
		{"a reader waits for every unordered writer", [][]any{{view(0, 4), Output}, {view(0, 4), Output}, {view(4, 2), Input}},
			[][]int{nil, nil, {1, 2}}, [][]int{nil, {1}, {2}}},
		{"an inout replaces the writers it waited for", [][]any{{view(0, 4), Output}, {view(0, 4), Output}, {view(0, 4), InOut}, {view(0, 4), Input}},
			[][]int{nil, nil, {1, 2}, {3}}, [][]int{nil, {1}, {2}, {3}}},
		// Strided views: column blocks of an 8x8 matrix are independent, a
		// whole-matrix reader waits for every block writer, and a
		// contiguous range between a block's rows meets none of them.
		{"column blocks", [][]any{{block(8, 0, 0, 8, 4), Output}, {block(8, 0, 4, 8, 4), Output}, {block(8, 0, 0, 8, 8), Input}},
			[][]int{nil, nil, {1, 2}}, [][]int{nil, nil, {1, 2}}},
		{"a column block and a contiguous read", [][]any{{block(8, 0, 4, 8, 4), Output}, {view(0, 4), Input}, {view(4*4, 4), Input}},
			[][]int{nil, nil, {1}}, nil},
		{"a contiguous writer and column blocks", [][]any{{view(0, 64), Output}, {block(8, 0, 0, 8, 4), Input}, {block(8, 0, 4, 8, 4), InOut}},
			[][]int{nil, {1}, {1}}, [][]int{nil, {1}, {1}}},
		{"row blocks of column blocks", [][]any{{block(8, 0, 0, 4, 4), Output}, {block(8, 4, 0, 4, 4), Output}, {block(8, 2, 2, 4, 4), Input}, {block(8, 4, 4, 4, 4), Input}},
			[][]int{nil, nil, {1, 2}, nil}, nil},
	}
	for _, c := range cases {
		for _, ordered := range []bool{false, true} {
			want := c.want
			if ordered && c.ordered != nil {
				want = c.ordered
			}
			d := newDepRun(ordered)
			for i, step := range c.steps {
				tk := d.add(step...)
				if got := d.producers(tk); !slices.Equal(got, want[i]) {
					t.Errorf("%s (order_hazards=%v): task %d waits on %v, want %v", c.name, ordered, i+1, got, want[i])
				}
			}
		}
	}
}

// A remote node's tensors are placed beside the tensors (TaskArgs.Remote,
// one per tensor once any is remote), so args with no remote tensor have
// none, and a tensor added after a remote one keeps its place.
func TestRemoteArgsBesideTensors(t *testing.T) {
	local := mkArgs(view(0, 4), Input, view(16, 4), Output)
	if local.Remote != nil {
		t.Fatalf("local args carry remote places %v", local.Remote)
	}
	buf := &RemoteBuffer{NBytes: 64, Access: AccessRW}
	mixed := mkArgs(view(0, 4), Input, remoteTensor{Tensor{Shape: []int{4}, DType: dtype.UInt8}, RemoteRef{Buf: buf, Offset: 8}}, InOut, view(16, 4), Output)
	if len(mixed.Remote) != 3 || !mixed.Remote[0].here() || mixed.Remote[1].Buf != buf || mixed.Remote[1].Offset != 8 || !mixed.Remote[2].here() {
		t.Fatalf("remote places %+v, want here, buf at 8, here", mixed.Remote)
	}
	if c := mixed.clone(); len(c.Remote) != 3 || &c.Remote[0] == &mixed.Remote[0] || local.clone().Remote != nil {
		t.Errorf("clone: remote places %+v (a copy of three wanted), local %v", c.Remote, local.clone().Remote)
	}
}

// Remote ranges are ordered within one owner allocation and generation.
func TestRemoteRangeDependencies(t *testing.T) {
	d := newDepRun(false)
	buf := &RemoteBuffer{Worker: 0, Owner: 0, BufferID: 3, Gen: 1, NBytes: 64, Access: AccessRW}
	imported := &RemoteBuffer{Worker: 0, Owner: 0, BufferID: 3, Gen: 1, NBytes: 32, Offset: 16, ImportID: 9, Access: AccessRW}
	later := &RemoteBuffer{Worker: 0, Owner: 0, BufferID: 3, Gen: 2, NBytes: 64, Access: AccessRW}
	rt := func(b *RemoteBuffer, off, n int) remoteTensor {
		return remoteTensor{Tensor{Shape: []int{n}, DType: dtype.UInt8}, RemoteRef{Buf: b, Offset: off}}
	}
	w := d.add(rt(buf, 0, 24), Output)
	if p := d.producers(d.add(rt(imported, 0, 4), Input)); !slices.Equal(p, []int{w.ID()}) {
		t.Errorf("an imported view of bytes 16..20 waits on %v", p)
	}
	if p := d.producers(d.add(rt(imported, 8, 4), Input)); p != nil {
		t.Errorf("an imported view past the write waits on %v", p)
	}
	if p := d.producers(d.add(rt(later, 0, 8), Input)); p != nil {
		t.Errorf("another generation waits on %v", p)
	}
}

// Against a brute-force model on random accesses of contiguous ranges
// and strided blocks of an 8x8 int32 matrix, under both rules: every
// dependency is a conflict (shared bytes; a read after a write, or under
// order_hazards any pair with a write), and every conflict between two
// tasks is ordered, directly or through others.
func TestRangeDependenciesModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for trial := range 200 {
		ordered := trial%2 == 1
		d := newDepRun(ordered)
		type acc struct {
			bytes         map[int]bool
			reads, writes bool
		}
		var accs []acc
		for range 30 {
			var ten Tensor
			if rng.Intn(2) == 0 {
				off, n := rng.Intn(16)*4, 1+rng.Intn(6)
				if rng.Intn(4) == 0 { // most of the matrix: it covers blocks whole
					off, n = rng.Intn(4)*4, 40+rng.Intn(20)
				}
				ten = view(off, n)
			} else {
				r0, c0 := rng.Intn(7), rng.Intn(7)
				ten = block(8, r0, c0, 2+rng.Intn(7-r0), 2+rng.Intn(7-c0))
			}
			tag := []Tag{Input, Output, InOut, OutputExisting}[rng.Intn(4)]
			d.add(ten, tag)
			accs = append(accs, acc{byteSet(ten), tag.Reads(), tag.Writes()})
		}
		conflict := func(a, b acc) bool { // a earlier than b
			shared := false
			for x := range a.bytes {
				shared = shared || b.bytes[x]
			}
			if ordered {
				return shared && (a.writes || b.writes)
			}
			return shared && a.writes && b.reads
		}
		for i, tk := range d.tasks {
			for _, p := range d.producers(tk) {
				if !conflict(accs[p-1], accs[i]) {
					t.Fatalf("trial %d: task %d waits on %d without a conflict", trial, i+1, p)
				}
			}
			for j := range i {
				if conflict(accs[j], accs[i]) && !reaches(d, tk, d.tasks[j]) {
					t.Fatalf("trial %d: tasks %d and %d conflict and are not ordered", trial, j+1, i+1)
				}
			}
		}
	}
}

// byteSet is every byte address a test tensor touches.
func byteSet(t Tensor) map[int]bool {
	st := t.Strides
	if st == nil {
		st = RowMajor(t.Shape)
	}
	set := map[int]bool{}
	var walk func(d, elem int)
	walk = func(d, elem int) {
		if d == len(t.Shape) {
			for b := range t.DType.Size() {
				set[int(t.Addr)+elem*t.DType.Size()+b] = true
			}
			return
		}
		for k := range t.Shape[d] {
			walk(d+1, elem+k*st[d])
		}
	}
	walk(0, 0)
	return set
}

// reaches reports whether t waits on p, directly or through others: a
// walk back from t over the producers of each task it reaches.
func reaches(d *depRun, t, p *Task) bool {
	seen := map[*Task]bool{}
	stack := []*Task{t}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, q := range d.producers(x) {
			if q == p.ID() {
				return true
			}
			if y := d.tasks[q-1]; !seen[y] {
				seen[y] = true
				stack = append(stack, y)
			}
		}
	}
	return false
}

// overlaps against the byte sets of pairs of views: exact for views laid
// out alike and for a contiguous range against any view; views laid out
// differently are taken to overlap when their bounding ranges meet.
func TestLayoutOverlap(t *testing.T) {
	i32 := func(off int, shape, strides []int) Tensor {
		return Tensor{Addr: 0x10000 + uint64(off), Shape: shape, Strides: strides, DType: dtype.Int32}
	}
	cases := []struct {
		name string
		a, b Tensor
		want bool
	}{
		{"column blocks", block(8, 0, 0, 8, 4), block(8, 0, 4, 8, 4), false},
		{"column blocks sharing a column", block(8, 0, 0, 8, 4), block(8, 0, 3, 8, 4), true},
		{"a tile inside a block", block(8, 0, 0, 8, 4), block(8, 2, 1, 2, 2), true},
		{"tiles on other rows", block(8, 0, 0, 2, 8), block(8, 2, 0, 2, 8), false},
		{"even and odd elements", i32(0, []int{8}, []int{2}), i32(4, []int{8}, []int{2}), false},
		{"even elements twice", i32(0, []int{8}, []int{2}), i32(8, []int{4}, []int{2}), true},
		{"halves of a row, misaligned", i32(0, []int{4, 2}, []int{8, 1}), i32(2, []int{4, 2}, []int{8, 1}), true},
		{"a range between a block's rows", block(8, 0, 4, 8, 4), view(0, 4), false},
		{"a range meeting a block's row", block(8, 0, 4, 8, 4), view(4*4, 1), true},
		// No shared byte, but laid out differently: an edge too many.
		{"other strides, bounds meet", i32(0, []int{4}, []int{4}), i32(8, []int{2}, []int{3}), true},
		{"bounds apart", block(8, 0, 0, 2, 2), block(8, 4, 4, 2, 2), false},
	}
	for _, c := range cases {
		_, la, _ := placeOf(c.a, RemoteRef{})
		_, lb, _ := placeOf(c.b, RemoteRef{})
		if got := core.Overlaps(la, lb); got != c.want {
			t.Errorf("%s: overlaps = %v, want %v", c.name, got, c.want)
		}
		if got := core.Overlaps(lb, la); got != c.want {
			t.Errorf("%s, swapped: overlaps = %v, want %v", c.name, got, c.want)
		}
		shared := false
		for x := range byteSet(c.a) {
			shared = shared || byteSet(c.b)[x]
		}
		if conservative := c.name == "other strides, bounds meet"; c.want != shared && !conservative || conservative && shared {
			t.Errorf("%s: the byte sets say %v", c.name, shared)
		}
	}
}
