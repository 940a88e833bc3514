package bench

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// RunPeakRSS runs cmd to its end and returns its peak resident set size
// in bytes, read from the child's own memory's high-water mark
// (/proc/PID/status, VmHWM) every few milliseconds while it runs.
//
// The rusage wait4 reports is not the child's alone: Linux records at
// exec the high-water mark of the memory the exec replaces, which for a
// child started with vfork is its parent's; a bench process that has grown
// to gigabytes (the collectives part) would report that for every child
// after it. VmHWM belongs to the memory the child runs in after exec. A
// peak in the child's last few milliseconds can be missed; it ends by
// unmapping, not growing.
func RunPeakRSS(cmd *exec.Cmd) (peak int64, err error) {
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if hwm, ok := readHWM(status); ok && hwm > peak {
			peak = hwm
		}
		select {
		case err := <-done:
			return peak, err
		case <-tick.C:
		}
	}
}

// readHWM is VmHWM of a /proc status file, in bytes.
func readHWM(path string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false // the child has gone, or is not there yet
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		return kb << 10, err == nil
	}
	return 0, false
}
