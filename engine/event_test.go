package engine

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Events takes no lock: an observer set or cleared while endpoints report
// tasks must be seen whole (go test -race checks the pointer is the only
// thing shared), and once cleared no event reaches it.
func TestObserveWhileTasksRun(t *testing.T) {
	w := newWorker(t, Config{})
	h := register(t, w, chipK("noop", func(*ChipCtx, *TaskArgs) error { return nil }))
	run := func() {
		mustRun(t, w, func(o *Orchestrator) error {
			for i := 0; i < 8; i++ {
				if _, err := o.SubmitNext(h, nil, nil, i%2); err != nil {
					return err
				}
			}
			return nil
		})
	}
	var seen atomic.Int64
	count := func(Event) { seen.Add(1) }

	w.Events().Observe(count)
	run()
	// Per task: submitted, started, finished; and the run's fence.
	if got := seen.Load(); got != 8*3+1 {
		t.Fatalf("one observed run of 8 tasks gave %d events, want %d", got, 8*3+1)
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 20; i++ {
			run()
		}
	}()
	for i := 0; i < 200; i++ {
		w.Events().Observe(count)
		w.Events().Observe(nil)
	}
	wg.Wait()

	before := seen.Load()
	run()
	if got := seen.Load(); got != before {
		t.Errorf("a run after Observe(nil) gave %d events, want none", got-before)
	}
	if w.events.on() {
		t.Error("Observe(nil) left the events on")
	}
}
