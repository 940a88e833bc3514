package proc

import (
	"strconv"
	"strings"
	"testing"

	"simpler/engine"
	"simpler/hal/dtype"
	"simpler/internal/enginetest"
)

// What the engine checks at its API it checks in process mode as in
// thread mode (engine's tests): the same refusals, with the same text,
// before anything is converted for a child.

// malloc's size is checked at the API, before it is converted for a
// child process.
func TestMallocSizeIsCheckedBeforeAnyConversion(t *testing.T) {
	w, _ := procWorker(t, 1, 0)
	for _, size := range []int{-1, 0} {
		_, err := w.Devices().Malloc(0, size)
		wantKindText(t, "malloc", err, engine.ValueError, "malloc: size must be > 0, got "+strconv.Itoa(size))
	}
	_, err := w.Devices().Malloc(0, 1<<40)
	wantKindText(t, "malloc of 1 TiB", err, engine.ValueError, "malloc: size 1099511627776 exceeds the device memory of one a2a3sim chip (68719476736 bytes)")
	p, err := w.Devices().Malloc(0, 64)
	if err != nil {
		t.Fatalf("malloc of 64 bytes: %v", err)
	}
	if err := w.Devices().Free(0, p); err != nil {
		t.Errorf("free: %v", err)
	}
}

// A task's args are bounded at submit as in thread mode: what a
// thread-mode worker takes, a process-mode one takes too.
func TestArgBoundsAtSubmit(t *testing.T) {
	sp := newSpace(t)
	w, _ := procWorker(t, 1, 0)
	h := register(t, w, procKernel{"noop"})
	x, _ := hostI64(t, sp, 1)
	many := &engine.TaskArgs{}
	for range 5000 {
		enginetest.Must(0, many.AddTensor(x, engine.Input))
	}
	deep := mkArgs(engine.Tensor{Addr: x.Addr, Shape: make([]int, 17), DType: dtype.Int64}, engine.Input)
	for i := range deep.Tensors[0].Shape {
		deep.Tensors[0].Shape[i] = 1
	}
	for what, a := range map[string]*engine.TaskArgs{"5000 tensors": many, "17 dimensions": deep} {
		err := submitRun(t, w, func(o *engine.Orchestrator) error { _, err := o.SubmitNext(h, a, nil, 0); return err })
		if engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), "at most") {
			t.Errorf("%s: %v", what, err)
		}
	}
	mustRun(t, w, func(o *engine.Orchestrator) error { // within the bounds it runs
		_, err := o.SubmitNext(h, mkArgs(x, engine.Input), nil, 0)
		return err
	})
}
