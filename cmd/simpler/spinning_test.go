package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// awaitSpinning waits until one of the processes pids names is spinning:
// it used at least 40% of a CPU in each of two 500 ms windows running, as a
// kernel spinning on a remote node does, and as a process starting up or
// waiting does not. The script cannot look for itself: remote_copy_from is
// refused while its run is in flight, as upstream refuses it.
func awaitSpinning(t *testing.T, what string, pids func() []int) {
	t.Helper()
	const window, least = 500 * time.Millisecond, 20 // ticks: 40% of a window at 100 Hz
	type sample struct {
		at    time.Time
		ticks int
	}
	seen := map[int][]sample{}
	// ticksAt is pid's ticks at the last sample no later than at.
	ticksAt := func(h []sample, at time.Time) (int, bool) {
		for i := len(h) - 1; i >= 0; i-- {
			if !h[i].at.After(at) {
				return h[i].ticks, true
			}
		}
		return 0, false
	}
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		now := time.Now()
		for _, pid := range pids() {
			c, ok := cpuTicks(pid)
			if !ok {
				continue
			}
			h := append(seen[pid], sample{now, c})
			seen[pid] = h
			mid, ok1 := ticksAt(h, now.Add(-window))
			old, ok2 := ticksAt(h, now.Add(-2*window))
			if ok1 && ok2 && c-mid >= least && mid-old >= least {
				return
			}
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// cpuTicks is the user and system CPU time pid has used, in clock ticks.
func cpuTicks(pid int) (int, bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.Atoi(f[11])
	stime, err2 := strconv.Atoi(f[12])
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return utime + stime, true
}
