package proc

import (
	"bytes"
	"testing"

	"simpler/engine"
	"simpler/hal/comm"
)

// The warm-slot kernels: "warmdirty" fills its rank's window with 0xab,
// "warmcheck" fails unless the window is zero and the CommContext names
// the allocation id in scalar 1.
func init() {
	window := func(a *engine.TaskArgs, c *engine.ChipCtx) (*comm.View, []byte, error) {
		v, err := comm.Open(c.Chip, a.Scalars[0])
		if err != nil {
			return nil, nil, err
		}
		base, _ := v.Base(v.Rank())
		b, err := c.Chip.Bytes(base, v.WindowSize())
		return v, b, err
	}
	procKernels["warmdirty"] = func(a *engine.TaskArgs, c *engine.ChipCtx, _ *engine.Stopper) error {
		_, b, err := window(a, c)
		if err == nil {
			copy(b, bytes.Repeat([]byte{0xab}, len(b)))
		}
		return err
	}
	procKernels["warmcheck"] = func(a *engine.TaskArgs, c *engine.ChipCtx, _ *engine.Stopper) error {
		v, b, err := window(a, c)
		if err != nil {
			return err
		}
		if v.AllocationID() != a.Scalars[1] {
			return engine.Errorf(engine.ValueError, "rank %d opens allocation %d, want %d", v.Rank(), v.AllocationID(), a.Scalars[1])
		}
		if !bytes.Equal(b, make([]byte, len(b))) {
			return engine.Errorf(engine.ValueError, "rank %d's window is not zero", v.Rank())
		}
		return nil
	}
}

// warmCall allocates a task_only domain over chips 0 and 1, runs k on
// both ranks and releases it; it returns each rank's window base.
func warmCall(t *testing.T, w *engine.Worker, k *engine.Handle, name string) []uint64 {
	t.Helper()
	var bases []uint64
	err := submitRun(t, w, func(o *engine.Orchestrator) error {
		d, err := o.AllocateDomain(engine.DomainSpec{Name: name, Workers: []int{0, 1}, WindowSize: 8192, TaskOnly: true})
		if err != nil {
			return err
		}
		var args []*engine.TaskArgs
		for id := 0; id < 2; id++ {
			v, err := d.Rank(id)
			if err != nil {
				return err
			}
			bases = append(bases, v.WindowBase)
			args = append(args, &engine.TaskArgs{Scalars: []uint64{v.DeviceCtx, d.AllocationID()}})
		}
		if _, err := o.SubmitNextGroup(k, args, nil, []int{0, 1}); err != nil {
			return err
		}
		return d.Release()
	})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return bases
}

// TestWarmSlotInProcessMode: the chip processes park their ranks and take
// them back (the same windows), zeroed and under the new allocation id.
// (A rank that cannot take its part back, as after a restart, falls back
// to a fresh allocation: engine's TestWarmSlotTakesBackAFreedDomain.)
func TestWarmSlotInProcessMode(t *testing.T) {
	w, _ := procWorker(t, 2, 0)
	dirty := register(t, w, procKernel{"warmdirty"})
	check := register(t, w, procKernel{"warmcheck"})
	b1 := warmCall(t, w, dirty, "first")
	b2 := warmCall(t, w, check, "second")
	if b1[0] != b2[0] || b1[1] != b2[1] {
		t.Errorf("the chip processes did not take the slot back: windows %#x, were %#x", b2, b1)
	}
}
