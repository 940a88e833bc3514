package comm

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"simpler/hal"
	"simpler/hal/shm"
)

// childEnv carries the Request to the child process of TestTwoProcesses.
const childEnv = "SIMPLER_COMM_TEST_CHILD"

// The same code serves ranks in separate processes: the child runs rank 1
// of a domain whose rank 0 runs here, agreeing only on the Request (with
// this process's name prefix). Signals cross the process boundary in both
// directions, the barrier works across it, and once both have released
// and the child has drained its pool, no object is left.
func TestTwoProcesses(t *testing.T) {
	if spec := os.Getenv(childEnv); spec != "" {
		childRank(t, spec)
		return
	}
	clean(t)
	chips := openChips(t, 1)
	req := newReq(2, 8192)
	req.Prefix = shm.Prefix()
	child := startChildUnder(t, shm.Prefix(), "TestTwoProcesses", childEnv, req)
	r0, err := Allocate(req, 0, chips[0])
	if err != nil {
		child.reap()
		t.Fatalf("%v\nchild output:\n%s", err, child.out.String())
	}
	v := mustOpen(t, r0, chips[0])
	if err := v.Notify(1, r0.Bases[1], 8, 7, "set"); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Wait(r0.WindowBase, 8, 8, "==", 20*time.Second); err != nil || got != 8 {
		t.Errorf("reply from the child: %d, %v", got, err)
	}
	// The child stores into this window with a plain copy after its 100th
	// barrier; the 101st orders that before the check.
	for range 101 {
		if err := v.Barrier(20 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if got := string(mustBytes(t, chips[0], r0.WindowBase+4096, 14)); got != "from the child" {
		t.Errorf("rank 0's window holds %q", got)
	}
	if err := r0.Release(); err != nil {
		t.Error(err)
	}
	if err := child.reap(); err != nil {
		t.Fatalf("child: %v\n%s", err, child.out.String())
	}
}

// childRank is rank 1 of TestTwoProcesses, in the child process.
func childRank(t *testing.T, spec string) {
	var req Request
	if err := json.Unmarshal([]byte(spec), &req); err != nil {
		t.Fatal(err)
	}
	p, err := hal.Lookup("a2a3sim")
	if err != nil {
		t.Fatal(err)
	}
	chip, err := p.OpenChip(1)
	if err != nil {
		t.Fatal(err)
	}
	defer chip.Close()
	r1, err := Allocate(req, 1, chip)
	if err != nil {
		t.Fatal(err)
	}
	err = func() error {
		v, err := Open(chip, r1.DeviceCtx)
		if err != nil {
			return err
		}
		if _, err := v.Wait(r1.WindowBase, 8, 7, "==", 20*time.Second); err != nil {
			return err
		}
		if err := v.Notify(0, r1.Bases[0], 8, 8, "set"); err != nil {
			return err
		}
		for range 100 {
			if err := v.Barrier(20 * time.Second); err != nil {
				return err
			}
		}
		if err := chip.CopyIn(r1.Bases[0]+4096, []byte("from the child")); err != nil {
			return err
		}
		return v.Barrier(20 * time.Second)
	}()
	err = errors.Join(err, r1.Release(), DrainPool())
	if err != nil {
		t.Fatal(err)
	}
	// The window went to this process's pool under the parent's prefix
	// and was drained: nothing of ours remains under it.
	if left := shm.Owned(); len(left) > 0 {
		t.Errorf("child left %v", left)
	}
}
