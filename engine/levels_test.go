package engine

import (
	"strings"
	"sync/atomic"
	"testing"
)

// Upstream's level rules: a level-3 worker with only SUB workers and a
// level-4 worker with no children are legal and run SUB work; device
// memory named on a level-4 worker is an IndexError, as an id outside a
// level-3 worker's chips is.
func TestLevelRulesAsUpstream(t *testing.T) {
	var ran atomic.Int64
	sub := subK("count", func(*SubCtx, *TaskArgs) error { ran.Add(1); return nil })
	for _, level := range []int{3, 4} {
		w := newWorker(t, Config{Level: level, DeviceIDs: []int{}, NumSubWorkers: 1})
		h := register(t, w, sub)
		mustRun(t, w, buildErr(func(o *Orchestrator) { must(o.SubmitSub(h, nil)) }))
		_, err := w.Devices().Malloc(0, 64)
		wantKind(t, "malloc with no chips", err, IndexError)
		if err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("level %d malloc: %v", level, err)
		}
		for _, direct := range []func() error{
			func() error { return w.Devices().Free(0, 0x1000) },
			func() error { return w.Devices().CopyTo(0, 0x1000, make([]byte, 4)) },
			func() error { return w.Devices().CopyFrom(0, make([]byte, 4), 0x1000) },
		} {
			wantKind(t, "direct control with no chips", direct(), IndexError)
		}
		err = submitRun(t, w, func(o *Orchestrator) error {
			_, err := o.SubmitNext(h, nil, nil, 0)
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "has no NEXT_LEVEL workers") {
			t.Errorf("level %d: a NEXT_LEVEL task with none: %v", level, err)
		}
	}
	if ran.Load() != 2 {
		t.Fatalf("%d SUB tasks ran, want 2", ran.Load())
	}
}
