package engine

import (
	"slices"
	"strings"
	"testing"

	"simpler/hal/dtype"
)

// Upstream's rules on a real worker: a later writer of bytes an earlier
// task read or wrote runs at the same time as it (the two meet), and
// under order_hazards it is ordered after it (an edge, checked before
// anything runs).
func TestInsertOnlyWritersRunWithEarlierTasks(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, Config{})
	x, _ := hostI64(t, sp, 4)
	for _, c := range [][2]Tag{{Input, Output}, {Input, OutputExisting}, {Output, Output}, {InOut, OutputExisting}, {Input, InOut}} {
		mustOverlap(t, w, nil, []any{x, c[0], 0}, []any{x, c[1], 1})
	}
}

func TestOrderHazardsOrdersEveryWrite(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, Config{OrderHazards: true})
	x, _ := hostI64(t, sp, 4)
	h := register(t, w, chipK("k", func(*ChipCtx, *TaskArgs) error { return nil }))
	for _, c := range [][2]Tag{{Input, Output}, {Input, OutputExisting}, {Output, Output}, {Input, InOut}} {
		var a, b *Task
		gate := make(chan struct{})
		hold := register(t, w, chipK("hold", func(*ChipCtx, *TaskArgs) error { return await(gate, "the gate") }))
		mustRun(t, w, buildErr(func(o *Orchestrator) {
			a = must(o.SubmitNext(hold, mkArgs(x, c[0]), nil, 0))
			b = must(o.SubmitNext(h, mkArgs(x, c[1]), nil, 1))
			if !locked(w, func() bool { return slices.Contains(a.Consumers(), &b.Task) && b.Pending() == 1 }) {
				t.Errorf("%s then %s: the writer does not wait under order_hazards", c[0], c[1])
			}
			close(gate)
		}))
	}
}

// Column blocks of one matrix: INOUT tasks on neighbouring blocks meet, a
// whole-matrix reader waits for both.
func TestColumnBlocksRunIndependently(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, Config{})
	m, _ := hostI64(t, sp, 32) // 4 x 8
	col := func(c0, n int) Tensor {
		return Tensor{Addr: m.Addr + uint64(8*c0), Shape: []int{4, n}, Strides: []int{8, 1}, DType: dtype.Int64}
	}
	mustOverlap(t, w, nil, []any{col(0, 4), InOut, 0}, []any{col(4, 4), InOut, 1})
	h := register(t, w, chipK("k", func(*ChipCtx, *TaskArgs) error { return nil }))
	gate := make(chan struct{})
	hold := register(t, w, chipK("hold", func(*ChipCtx, *TaskArgs) error { return await(gate, "the gate") }))
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		a := must(o.SubmitNext(hold, mkArgs(col(0, 4), Output), nil, 0))
		b := must(o.SubmitNext(hold, mkArgs(col(4, 4), Output), nil, 1))
		r := must(o.SubmitNext(h, mkArgs(m, Input), nil, 0))
		if !locked(w, func() bool {
			return slices.Contains(a.Consumers(), &r.Task) && slices.Contains(b.Consumers(), &r.Task) && r.Pending() == 2
		}) {
			t.Error("the whole-matrix reader does not wait for both block writers")
		}
		close(gate)
	}))
}

// The submit-time refusals: each a ValueError, the task never made.
func TestOverlappingWritesAndBadStridesAreRefused(t *testing.T) {
	sp := newSpace(t)
	w := newWorker(t, Config{})
	x, _ := hostI64(t, sp, 8)
	h := register(t, w, chipK("k", func(*ChipCtx, *TaskArgs) error { return nil }))
	half := Tensor{Addr: x.Addr + 16, Shape: []int{4}, DType: dtype.Int64}
	cases := []struct {
		name string
		args *TaskArgs
		want string
	}{
		{"overlapping writes", mkArgs(x, Output, half, InOut), "tensors 0 (OUTPUT"},
		{"zero stride written", mkArgs(Tensor{Addr: x.Addr, Shape: []int{2, 4}, Strides: []int{0, 1}, DType: dtype.Int64}, Output), "stride 0"},
		{"negative stride", mkArgs(Tensor{Addr: x.Addr + 56, Shape: []int{4}, Strides: []int{-1}, DType: dtype.Int64}, Input), "negative"},
		{"strides leave the buffer", mkArgs(Tensor{Addr: x.Addr, Shape: []int{2, 4}, Strides: []int{1 << 30, 1}, DType: dtype.Int64}, Input), "tensor 0"},
		{"strides for other dims", mkArgs(Tensor{Addr: x.Addr, Shape: []int{2, 4}, Strides: []int{4}, DType: dtype.Int64}, Input), "1 strides for 2"},
	}
	for _, c := range cases {
		var tk *Task
		err := submitRun(t, w, func(o *Orchestrator) error {
			var err error
			tk, err = o.SubmitNext(h, c.args, nil, 0)
			if err == nil {
				return nil
			}
			if o.run.core.Tasks() != 0 {
				t.Errorf("%s: the refused task was counted", c.name)
			}
			return err
		})
		if KindOf(err) != ValueError || !strings.Contains(err.Error(), c.want) || tk != nil {
			t.Errorf("%s: got %v, want a ValueError saying %q", c.name, err, c.want)
		}
	}
}

// A remote node's TASK carries a shape, not strides: a strided view bound
// for one is refused; a local one is let through.
func TestStridedViewsStayLocal(t *testing.T) {
	col := Tensor{Addr: 0x10000, Shape: []int{4, 2}, Strides: []int{8, 1}, DType: dtype.Int32}
	if err := checkStrided("submit_next_level", 0, col, Input, true); KindOf(err) != ValueError || !strings.Contains(err.Error(), "remote node") {
		t.Errorf("a strided view for a remote node: %v", err)
	}
	if err := checkStrided("submit_next_level", 0, col, Input, false); err != nil {
		t.Errorf("a strided view for a local worker: %v", err)
	}
}
