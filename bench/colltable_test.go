package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestWindowTable: issue 28's rows take the fastest window algorithm of
// each rank count and size (never direct or auto, however fast), name it,
// and judge it against Open MPI and memcpy from the same run.
func TestWindowTable(t *testing.T) {
	const small, big = 4 << 10, 64 << 20
	pt := func(algo string, n, size int, d time.Duration) collPoint {
		return collPoint{name: "allreduce", algo: algo, ranks: n, size: size, t: d}
	}
	f := collFigures{
		pts: []collPoint{
			pt("direct", 2, small, 5*time.Microsecond), pt("onephase", 2, small, 20*time.Microsecond), pt("ring", 2, small, 11*time.Microsecond),
			pt("twophase", 4, small, 60*time.Microsecond), pt("onephase", 4, small, 50*time.Microsecond),
			// 64 MiB in 10 ms is 6.7 GB/s of busbw at 2 ranks (factor 1)
			pt("ring", 2, big, 10*time.Millisecond), pt("auto", 2, big, time.Millisecond),
			pt("bidirectional_ring", 4, big, 100*time.Millisecond),
		},
		memcpy: 10e9,
		peer:   &mpiFigures{allreduce: map[int]map[int]time.Duration{2: {small: 1200 * time.Nanosecond}, 4: {small: 20 * time.Microsecond}}},
	}
	if algo, d := bestWindow(f.pts, 2, small); algo != "ring" || d != 11*time.Microsecond {
		t.Errorf("best at 2 ranks: %s %v", algo, d)
	}
	var out bytes.Buffer
	if f.windowTable(&out) {
		t.Errorf("every goal met:\n%s", out.String())
	}
	for _, want := range []string{
		"4 KiB allreduce, 2 ranks, ring", "met (9.17 x)",
		"4 KiB allreduce, 4 ranks, onephase", "MISSED (2.50 x)",
		"64 MiB allreduce busbw / memcpy, 2 ranks, ring", "0.671",
		"64 MiB allreduce busbw / memcpy, 4 ranks, bidirectional_ring", "issue 28: a goal was MISSED",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
}
