package bench

import (
	"os/exec"
	"testing"
)

// TestRunPeakRSSIsTheChildsOwn: a child that fills a 64 MiB buffer again
// and again reports nearly that much (a poll may come a page or two
// short), and a small child started from this process
// while it holds 256 MiB reports far less (wait4's rusage would give this
// process's mark).
func TestRunPeakRSSIsTheChildsOwn(t *testing.T) {
	hold := make([]byte, 256<<20)
	for i := 0; i < len(hold); i += 4096 {
		hold[i] = 1
	}
	run := func(name string, args ...string) int64 {
		peak, err := RunPeakRSS(exec.Command(name, args...))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return peak
	}
	if big := run("dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=16", "status=none"); big < 60<<20 {
		t.Errorf("a child that filled a 64 MiB buffer peaked at %d MiB", big>>20)
	}
	if small := run("sleep", "0.1"); small <= 0 || small > 64<<20 {
		t.Errorf("a small child of a process holding 256 MiB peaked at %d MiB", small>>20)
	}
	if hold[0] != 1 { // keep this process's memory live until here
		t.Fatal("the held memory changed")
	}
}
