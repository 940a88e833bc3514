package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// awaitSpinning waits until one of the processes pids names has used half
// a second of CPU since it was first seen: a kernel spinning on a remote
// node. The script cannot look for itself: remote_copy_from is refused
// while its run is in flight, as upstream refuses it.
func awaitSpinning(t *testing.T, what string, pids func() []int) {
	t.Helper()
	first := map[int]int{}
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, pid := range pids() {
			c, ok := cpuTicks(pid)
			if !ok {
				continue
			}
			c0, seen := first[pid]
			if !seen {
				first[pid] = c
				continue
			}
			if c-c0 >= 50 {
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
