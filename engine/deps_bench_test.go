package engine

import (
	"testing"

	"simpler/engine/hostmem"
	"simpler/engine/internal/core"
	"simpler/hal/dtype"
)

// The cost of dependency inference and of dispatch, for comparing the
// tag rules: go test ./engine -run '^$' -bench 'Wire|Dispatch'.

// benchViews are n int64 views of 8 elements each, one after another in
// one buffer at 0x10000.
func benchViews(n int) []Tensor {
	vs := make([]Tensor, n)
	for i := range vs {
		vs[i] = Tensor{Addr: 0x10000 + uint64(64*i), Shape: []int{8}, DType: dtype.Int64}
	}
	return vs
}

// benchWire wires b.N tasks into runs of 1024, each reading one view and
// writing the next (a pipeline over 64 views of one buffer).
func benchWire(b *testing.B, cfg Config) {
	vs := benchViews(64)
	var d *depRun
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if i%1024 == 0 {
			d = newBenchRun(cfg.OrderHazards)
		}
		d.wireOne(TaskArgs{Tensors: []Tensor{vs[i%64], vs[(i+1)%64]}, Tags: []Tag{Input, Output}})
	}
}

func BenchmarkWire(b *testing.B) { benchWire(b, Config{}) }

// newBenchRun is newDepRun for a run nobody observes, as most are: its
// tasks keep no list of their producers.
func newBenchRun(ordered bool) *depRun {
	d := &depRun{c: core.New(core.Config{Next: 2, OrderHazards: ordered}), r: &Run{}}
	d.c.Begin(&d.r.core, 1, false)
	return d
}

// wireOne wires a single task of a on NEXT_LEVEL worker 0 as a submit
// does (its args in the task's own array), keeping nothing of it.
func (d *depRun) wireOne(a TaskArgs) {
	t := &Task{}
	t.Payload = t
	t.args = t.one[:]
	t.args[0] = a
	d.c.Submit(&d.r.core, &t.Task, core.Job{Pool: NextLevel, Worker: 0}, 1)
	d.r.wire(t)
}

// benchDispatch submits runs of 64 tasks, each reading one view of a host
// buffer and writing the next, on a thread-mode worker of two chips
// whose kernel does nothing: submit, inference, dispatch and retire.
func benchDispatch(b *testing.B, cfg Config) {
	sp := hostmem.NewSpace()
	defer sp.Close()
	addr, _, err := sp.Alloc(64 * 64)
	if err != nil {
		b.Fatal(err)
	}
	vs := benchViews(64)
	for i := range vs {
		vs[i].Addr = addr + uint64(64*i)
	}
	cfg.Level, cfg.DeviceIDs, cfg.Platform = 3, []int{0, 1}, sim(b)
	w, err := NewWorker(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	if err := w.Init(); err != nil {
		b.Fatal(err)
	}
	h, err := w.Registry().Register(chipK("noop", func(*ChipCtx, *TaskArgs) error { return nil }), nil)
	if err != nil {
		b.Fatal(err)
	}
	args := make([]TaskArgs, 64)
	for i := range args {
		args[i] = TaskArgs{Tensors: []Tensor{vs[i], vs[(i+1)%64]}, Tags: []Tag{Input, Output}}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i += 64 {
		r, err := w.Submit(func(o *Orchestrator) (any, error) {
			for k := range args {
				if _, err := o.SubmitNext(h, &args[k], nil, k%2); err != nil {
					return nil, err
				}
			}
			return nil, nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Wait(deadline); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDispatch(b *testing.B) { benchDispatch(b, Config{}) }

// BenchmarkWireStrided wires tasks that each write one of 8 column blocks
// of a 64x64 int64 matrix and read the block before it: the strided path,
// with per-dimension comparisons between blocks.
func BenchmarkWireStrided(b *testing.B) {
	blocks := make([]Tensor, 8)
	for i := range blocks {
		blocks[i] = Tensor{Addr: 0x10000 + uint64(8*8*i), Shape: []int{64, 8}, Strides: []int{64, 1}, DType: dtype.Int64}
	}
	var d *depRun
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if i%1024 == 0 {
			d = newBenchRun(false)
		}
		d.wireOne(TaskArgs{Tensors: []Tensor{blocks[i%8], blocks[(i+1)%8]}, Tags: []Tag{Input, Output}})
	}
}
