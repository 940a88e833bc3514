package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"simpler/engine/internal/core"
	"simpler/hal/dtype"
)

// Dependency inference, heap outputs, failure poisoning, groups and
// back-pressure through the public Go API on a level-3 worker.

// TestDepChainRunsInOrder: A writes X (OUTPUT), B updates it (INOUT), C
// reads it (INPUT), each on a worker where it could otherwise start at
// once. A is held until all three are submitted, so a missing edge shows
// up as a wrong order, a wrong value or a wrong pending count.
func TestDepChainRunsInOrder(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, Config{})
	x, _ := hostI64(t, sp, 1)
	gate := make(chan struct{})
	var rec recorder
	hA := register(t, w, chipK("A", func(c *ChipCtx, a *TaskArgs) error {
		if err := await(gate, "gate"); err != nil {
			return err
		}
		put64(devBytes(c, a, 0), 1)
		rec.add("A")
		return nil
	}))
	hB := register(t, w, chipK("B", func(c *ChipCtx, a *TaskArgs) error {
		b := devBytes(c, a, 0)
		put64(b, get64(b)+1)
		rec.add("B")
		return nil
	}))
	hC := register(t, w, chipK("C", func(c *ChipCtx, a *TaskArgs) error {
		rec.add("C saw %d", get64(devBytes(c, a, 0)))
		return nil
	}))
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		ta := must(o.SubmitNext(hA, mkArgs(x, Output), nil, 0))
		tb := must(o.SubmitNext(hB, mkArgs(x, InOut), nil, 1))
		tc := must(o.SubmitNext(hC, mkArgs(x, Input), nil, 0))
		ok := locked(w, func() bool {
			return tb.Pending() == 1 && tc.Pending() == 1 &&
				slices.Equal(ta.Consumers(), []*core.Task{&tb.Task}) && slices.Equal(tb.Consumers(), []*core.Task{&tc.Task})
		})
		if !ok {
			t.Error("edges are not A->B->C")
		}
		close(gate)
	}))
	if got, want := rec.get(), []string{"A", "B", "C saw 2"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// meet is a kernel that closes its own channel and then waits for its
// partner's: two of them complete only if they run at the same time.
func meet(mine, theirs chan struct{}) func() error {
	return func() error {
		close(mine)
		return await(theirs, "the partner task")
	}
}

// mustOverlap submits A then B (tensor, tag, worker each) and requires
// them to run at the same time, which proves B does not depend on A.
func mustOverlap(t *testing.T, w *Worker, pre func(o *Orchestrator), a, b []any) {
	t.Helper()
	chA, chB := make(chan struct{}), make(chan struct{})
	fa, fb := meet(chA, chB), meet(chB, chA)
	hA := register(t, w, chipK("A", func(*ChipCtx, *TaskArgs) error { return fa() }))
	hB := register(t, w, chipK("B", func(*ChipCtx, *TaskArgs) error { return fb() }))
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		if pre != nil {
			pre(o)
		}
		must(o.SubmitNext(hA, mkArgs(a[:2]...), nil, a[2].(int)))
		must(o.SubmitNext(hB, mkArgs(b[:2]...), nil, b[2].(int)))
	}))
}

func TestInputOnlyTasksRunConcurrently(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, Config{})
	x, _ := hostI64(t, sp, 4)
	hW := register(t, w, chipK("writer", func(*ChipCtx, *TaskArgs) error { return nil }))
	// Both readers follow one writer but not each other.
	writer := func(o *Orchestrator) { must(o.SubmitNext(hW, mkArgs(x, Output), nil, 0)) }
	mustOverlap(t, w, writer, []any{x, Input, 0}, []any{x, Input, 1})
}

func TestNoDepCreatesNoEdge(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, Config{})
	x, _ := hostI64(t, sp, 4)
	// NO_DEP does not wait for the writer ...
	mustOverlap(t, w, nil, []any{x, Output, 0}, []any{x, NoDep, 1})
	// ... and does not become the writer a later reader waits for.
	mustOverlap(t, w, nil, []any{x, NoDep, 0}, []any{x, Input, 1})
}

// Device memory is keyed per NEXT_LEVEL worker: the same device address on
// two chips is two different tensors.
func TestDeviceKeysArePerWorker(t *testing.T) {
	d := newDepRun(false)
	dev := Tensor{Addr: 0x1000, Shape: []int{1}, DType: dtype.Int64, ChildMemory: true}
	host := dev
	host.ChildMemory = false
	w0 := core.Job{Pool: NextLevel, Worker: 0}
	w1 := core.Job{Pool: NextLevel, Worker: 1}
	p := d.addOn(w0, mkArgs(dev, Output))
	if q := d.addOn(w1, mkArgs(dev, Input)); q.Pending() != 0 {
		t.Error("device read on worker 1 waits for a write on worker 0")
	}
	if q := d.addOn(w0, mkArgs(host, Input)); q.Pending() != 0 {
		t.Error("host read waits for a device write at the same address")
	}
	if q := d.addOn(w0, mkArgs(dev, Input)); q.Pending() != 1 || p.Consumers()[0] != &q.Task {
		t.Error("device read on worker 0 does not wait for the write on worker 0")
	}
	// A group member's device tensors are keyed on that member's worker.
	g := d.addOn(core.Job{Pool: NextLevel, Worker: -1, Group: []int{1, 0}}, mkArgs(dev, Input), mkArgs(dev, Input))
	if g.Pending() != 1 || !slices.Contains(p.Consumers(), &g.Task) {
		t.Errorf("group reading worker 0's tensor: pending %d", g.Pending())
	}
}

func TestDeviceTensorDependency(t *testing.T) {
	w := newWorker(t, Config{})
	gate := make(chan struct{})
	var rec recorder
	hA := register(t, w, chipK("A", func(c *ChipCtx, a *TaskArgs) error {
		if err := await(gate, "gate"); err != nil {
			return err
		}
		put64(devBytes(c, a, 0), 42)
		return nil
	}))
	hB := register(t, w, chipK("B", func(c *ChipCtx, a *TaskArgs) error {
		rec.add("B saw %d", get64(devBytes(c, a, 0)))
		return nil
	}))
	p, err := w.Devices().Malloc(0, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Devices().Free(0, p)
	d := Tensor{Addr: p, Shape: []int{1}, DType: dtype.Int64, ChildMemory: true}
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		must(o.SubmitNext(hA, mkArgs(d, Output), nil, 0))
		must(o.SubmitNext(hB, mkArgs(d, Input), nil, 0))
		close(gate)
	}))
	if got := rec.get(); !slices.Equal(got, []string{"B saw 42"}) {
		t.Fatalf("got %v", got)
	}
}

func TestOutputWithoutAddressComesFromHeap(t *testing.T) {
	w := newWorker(t, Config{})
	gate := make(chan struct{})
	var saw atomic.Int64
	hP := register(t, w, chipK("producer", func(c *ChipCtx, a *TaskArgs) error {
		if err := await(gate, "gate"); err != nil {
			return err
		}
		put64(devBytes(c, a, 0), 7)
		return nil
	}))
	hC := register(t, w, chipK("consumer", func(c *ChipCtx, a *TaskArgs) error {
		saw.Store(get64(devBytes(c, a, 0)))
		return nil
	}))
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		out := mkArgs(Tensor{Shape: []int{2}, DType: dtype.Int64}, Output)
		must(o.SubmitNext(hP, out, nil, 0))
		addr := out.Tensors[0].Addr
		if addr == 0 || locked(w, func() *heapBlock { return w.heap.find(addr, 16) }) == nil {
			t.Errorf("OUTPUT address %#x was not filled in from the heap", addr)
		}
		c := must(o.SubmitNext(hC, mkArgs(out.Tensors[0], Input), nil, 1))
		if locked(w, func() int { return c.Pending() }) != 1 {
			t.Error("the consumer of a heap OUTPUT does not wait for its producer")
		}
		close(gate)
	}))
	if saw.Load() != 7 {
		t.Fatalf("consumer saw %d, want 7", saw.Load())
	}
	if used := locked(w, func() int { return w.heap.used() }); used != 0 {
		t.Fatalf("heap holds %d bytes after the run", used)
	}
}

// taskErr extracts a *TaskError or fails.
func taskErr(t *testing.T, err error) *TaskError {
	t.Helper()
	var te *TaskError
	if !errors.As(err, &te) {
		t.Fatalf("got %v (%T), want a *TaskError", err, err)
	}
	return te
}

func TestFailurePoisonsConsumersOnly(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, Config{NumSubWorkers: 1})
	x, _ := hostI64(t, sp, 1)
	y, _ := hostI64(t, sp, 1)
	z, _ := hostI64(t, sp, 1)
	var rec recorder
	ok := func(name string) *chipFn {
		return chipK(name, func(*ChipCtx, *TaskArgs) error { rec.add("%s", name); return nil })
	}
	hFail := register(t, w, chipK("failing", func(*ChipCtx, *TaskArgs) error { return errors.New("boom") }))
	hB, hD := register(t, w, ok("B")), register(t, w, ok("D"))
	hC := register(t, w, subK("C", func(*SubCtx, *TaskArgs) error { rec.add("C"); return nil }))
	var drainErr error
	err := submitRun(t, w, buildErr(func(o *Orchestrator) {
		must(o.SubmitNext(hFail, mkArgs(x, Output), nil, 0))
		must(o.SubmitNext(hB, mkArgs(x, Input, y, Output), nil, 1)) // direct consumer
		must(o.SubmitSub(hC, mkArgs(y, Input)))                     // transitive consumer
		must(o.SubmitNext(hD, mkArgs(z, Output), nil, 1))           // independent
		drainErr = o.Drain()
		if got := rec.get(); !slices.Equal(got, []string{"D"}) {
			t.Errorf("after drain ran %v, want only D", got)
		}
	}))
	te := taskErr(t, err)
	if te.TaskID != 1 || te.Worker != "chip_worker 0 (device 0)" || te.Callable != "failing" || te.Err.Error() != "boom" {
		t.Errorf("task error %+v", te)
	}
	if msg := err.Error(); !strings.Contains(msg, "chip_worker 0 (device 0)") || !strings.Contains(msg, `"failing"`) || !strings.Contains(msg, "boom") {
		t.Errorf("message %q", msg)
	}
	if drainErr != err {
		t.Errorf("drain returned %v, want the run's failure", drainErr)
	}
	// The same worker runs the next run normally.
	mustRun(t, w, func(o *Orchestrator) error {
		_, err := o.SubmitNext(hB, mkArgs(x, Input, y, Output), nil, 0)
		return err
	})
	if got := rec.get(); !slices.Equal(got, []string{"D", "B"}) {
		t.Fatalf("ran %v, want D then B", got)
	}
}

// The failure reported is the root failure with the lowest task id,
// whichever of two failing tasks retires first.
func TestFirstRootErrorByTaskID(t *testing.T) {
	w := newWorker(t, Config{})
	for _, later := range []int{1, 2} { // the task that fails second
		var run atomic.Pointer[Run]
		fail := func(id int) *chipFn {
			return chipK(fmt.Sprint("fail", id), func(*ChipCtx, *TaskArgs) error {
				if id == later {
					if err := until("the other failure", func() bool {
						return locked(w, func() bool { return run.Load().core.FirstErr() != nil })
					}); err != nil {
						return err
					}
				}
				return fmt.Errorf("failure %d", id)
			})
		}
		h1, h2 := register(t, w, fail(1)), register(t, w, fail(2))
		err := submitRun(t, w, buildErr(func(o *Orchestrator) {
			run.Store(o.Run())
			must(o.SubmitNext(h1, nil, nil, 0))
			must(o.SubmitNext(h2, nil, nil, 1))
		}))
		if te := taskErr(t, err); te.TaskID != 1 || te.Callable != "fail1" || te.Worker != "chip_worker 0 (device 0)" {
			t.Fatalf("task %d failing second: got %v", later, err)
		}
	}
}

func TestPanicBecomesTaskFailure(t *testing.T) {
	w := newWorker(t, Config{NumSubWorkers: 1})
	hc := register(t, w, chipK("chip_panics", func(*ChipCtx, *TaskArgs) error { panic("kaboom") }))
	hs := register(t, w, subK("sub_panics", func(*SubCtx, *TaskArgs) error { panic("kaboom") }))
	cases := map[string]func(o *Orchestrator) (*Task, error){
		"chip_worker 1 (device 1)": func(o *Orchestrator) (*Task, error) { return o.SubmitNext(hc, nil, nil, 1) },
		"sub_worker 0":             func(o *Orchestrator) (*Task, error) { return o.SubmitSub(hs, nil) },
	}
	for where, submit := range cases {
		err := submitRun(t, w, func(o *Orchestrator) error { _, err := submit(o); return err })
		te := taskErr(t, err)
		if te.Worker != where || KindOf(err) != RuntimeError || !strings.Contains(err.Error(), "panic: kaboom") {
			t.Errorf("got %v", err)
		}
	}
}

func TestGroups(t *testing.T) {
	w := newWorker(t, Config{NumSubWorkers: 2})
	var rec recorder
	chans := []chan struct{}{make(chan struct{}), make(chan struct{})}
	subChans := []chan struct{}{make(chan struct{}), make(chan struct{})}
	hg := register(t, w, chipK("grouped", func(c *ChipCtx, a *TaskArgs) error {
		m := a.Scalars[0]
		rec.add("member %d on chip %d", m, c.WorkerID)
		return meet(chans[m], chans[1-m])() // members run at once
	}))
	hs := register(t, w, subK("sub_grouped", func(c *SubCtx, a *TaskArgs) error {
		m := a.Scalars[0]
		rec.add("sub member %d", m)
		return meet(subChans[m], subChans[1-m])()
	}))
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		must(o.SubmitNextGroup(hg, []*TaskArgs{mkArgs(uint64(0)), mkArgs(uint64(1))}, nil, []int{1, 0}))
		must(o.SubmitSubGroup(hs, []*TaskArgs{mkArgs(uint64(0)), mkArgs(uint64(1))}))
		_, err := o.SubmitSubGroup(hs, []*TaskArgs{{}, {}, {}})
		wantKind(t, "SUB group larger than the pool", err, ValueError)
		if n := o.Run().Tasks(); n != 2 {
			t.Errorf("%d tasks after a refused group, want 2", n)
		}
	}))
	got := rec.get()
	slices.Sort(got)
	want := []string{"member 0 on chip 1", "member 1 on chip 0", "sub member 0", "sub member 1"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// With a task window of 2, submitting 50 tasks waits for retirements and
// never has more than 2 submitted and unretired.
func TestBackPressure(t *testing.T) {
	w := newWorker(t, Config{TaskWindow: 2})
	var order []uint64 // one worker: kernels run one at a time
	var maxInflight int
	h := register(t, w, chipK("step", func(c *ChipCtx, a *TaskArgs) error {
		order = append(order, a.Scalars[0])
		maxInflight = max(maxInflight, locked(w, func() int { return w.core.Inflight() }))
		return nil
	}))
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		for i := range uint64(50) {
			must(o.SubmitNext(h, mkArgs(i), nil, 0))
			if n := locked(w, func() int { return w.core.Inflight() }); n > 2 {
				t.Errorf("%d tasks in flight after submit %d", n, i)
			}
		}
	}))
	want := make([]uint64, 50)
	for i := range want {
		want[i] = uint64(i)
	}
	if !slices.Equal(order, want) {
		t.Fatalf("ran %v", order)
	}
	if maxInflight < 1 || maxInflight > 2 {
		t.Fatalf("max in flight seen by kernels %d, want 1..2", maxInflight)
	}
}
