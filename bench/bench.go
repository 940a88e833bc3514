// Package bench measures simpler against baselines taken in the same run.
// Each benchmark returns figures and the ratio to its limit, never a bare
// time: on a shared two-core machine only ratios travel.
package bench

import (
	"fmt"
	"io"
	"sort"
	"time"
)

// Line is a fit of per-run time against tasks per run: time = Fixed +
// Marginal × tasks.
type Line struct {
	Fixed    time.Duration
	Marginal time.Duration
}

// fit is least squares over (tasks, seconds) points, each weighted by
// 1/time², so that every point counts by its relative error: a plain fit
// lets the 4096-task point decide the intercept alone.
func fit(ns []int, ts []time.Duration) Line {
	var sw, sx, sy, sxx, sxy float64
	for i := range ns {
		x, y := float64(ns[i]), ts[i].Seconds()
		w := 1 / (y * y)
		sw += w
		sx += w * x
		sy += w * y
		sxx += w * x * x
		sxy += w * x * y
	}
	slope := (sw*sxy - sx*sy) / (sw*sxx - sx*sx)
	icept := (sy - slope*sx) / sw
	return Line{Fixed: seconds(icept), Marginal: seconds(slope)}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// median runs f reps times and returns the median duration.
func median(reps int, f func() error) (time.Duration, error) {
	ds := make([]time.Duration, reps)
	for i := range ds {
		start := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		ds[i] = time.Since(start)
	}
	return mid(ds), nil
}

// mid is the median of ds, which it sorts.
func mid(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

// Sizes are the tasks-per-run points of the dispatch benchmarks.
var Sizes = []int{1, 4, 16, 64, 256, 1024, 4096}

// reps chooses repetitions so each point takes a similar time.
func reps(n int) int { return max(21, 16384/n) }

// Report prints a table row: name, figures, and the verdict against a
// target.
func verdict(w io.Writer, what string, got, target float64, unit string) bool {
	ok := got <= target
	mark := "ok"
	if !ok {
		mark = "OVER TARGET"
	}
	fmt.Fprintf(w, "  %-34s %10.2f %-6s (target <= %.2f) %s\n", what, got, unit, target, mark)
	return ok
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// medianLine takes the median fixed and marginal costs of several fits.
func medianLine(ls []Line) Line {
	f := make([]time.Duration, len(ls))
	m := make([]time.Duration, len(ls))
	for i, l := range ls {
		f[i], m[i] = l.Fixed, l.Marginal
	}
	sort.Slice(f, func(i, j int) bool { return f[i] < f[j] })
	sort.Slice(m, func(i, j int) bool { return m[i] < m[j] })
	return Line{Fixed: f[len(f)/2], Marginal: m[len(m)/2]}
}
