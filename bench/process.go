package bench

import (
	"fmt"
	"io"
	"time"

	"simpler/engine"
	"simpler/engine/proc"
	"simpler/hal"
)

// Process prints the process-mode dispatch figures (chips as child
// processes behind shared-memory mailboxes) and the start-up time of a
// tree, and reports whether the targets were met.
func Process(w io.Writer, l *engine.Launcher) (bool, error) {
	const chips = 2
	star, goAPI, err := scriptDispatch("process", chips, l)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(w, "dispatch: no-op chip tasks, %d chips, process mode, %v tasks per run\n", chips, Sizes)
	fmt.Fprintf(w, "  %-34s fixed %7.2f us/run   marginal %6.3f us/task\n", "Starlark orchestration", micros(star.Fixed), micros(star.Marginal))
	fmt.Fprintf(w, "  %-34s fixed %7.2f us/run   marginal %6.3f us/task\n", "Go API, same Starlark kernel", micros(goAPI.Fixed), micros(goAPI.Marginal))
	ok := verdict(w, "process marginal per task", micros(star.Marginal), 8, "us")
	noteRow(Row{Figure: RowProcessMarginal, Met: ok, Value: fmt.Sprintf("%.2f us per task from a script (the Go API: %.2f us)",
		micros(star.Marginal), micros(goAPI.Marginal))})
	ok = verdict(w, "process fixed per run", micros(star.Fixed), 60, "us") && ok
	up, err := startup(l, 4)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(w, "  %-34s %10.2f ms (4 chip processes, median of 5)\n", "start-up, L3 with 4 chips", float64(up)/float64(time.Millisecond))
	up4, err := startupL4(l)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(w, "  %-34s %10.2f ms (2 node processes, each with 2 chip processes, median of 5)\n", "start-up, L4 -> 2 x L3 x 2 chips", float64(up4)/float64(time.Millisecond))
	return ok, nil
}

// startupL4 times init() of a process-mode L4 worker over two level-3
// nodes of two chips, then its close.
func startupL4(l *engine.Launcher) (time.Duration, error) {
	p, err := hal.Lookup("a2a3sim")
	if err != nil {
		return 0, err
	}
	return median(5, func() error {
		w, err := engine.NewWorker(engine.Config{Level: 4, Platform: p, Mode: "process", Launcher: l, Spawn: proc.Spawner{}})
		if err != nil {
			return err
		}
		for n := 0; n < 2; n++ {
			c, err := engine.NewWorker(engine.Config{Level: 3, Platform: p, DeviceIDs: []int{2 * n, 2*n + 1}, Mode: "process", Launcher: l, Spawn: proc.Spawner{}})
			if err != nil {
				return err
			}
			if _, err := w.AddWorker(c); err != nil {
				return err
			}
		}
		if err := w.Init(); err != nil {
			w.Close()
			return err
		}
		return w.Close()
	})
}

// startup times init() of a process-mode L3 worker with n chips, then its
// close.
func startup(l *engine.Launcher, n int) (time.Duration, error) {
	p, err := hal.Lookup("a2a3sim")
	if err != nil {
		return 0, err
	}
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	return median(5, func() error {
		w, err := engine.NewWorker(engine.Config{Level: 3, Platform: p, DeviceIDs: ids, Mode: "process", Launcher: l, Spawn: proc.Spawner{}})
		if err != nil {
			return err
		}
		if err := w.Init(); err != nil {
			w.Close()
			return err
		}
		return w.Close()
	})
}
