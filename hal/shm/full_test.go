package shm

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"simpler/kind"
)

// fullEnv marks a run of this test binary inside a mount namespace of its
// own, whose /dev/shm is a 4 MiB tmpfs (RunOnSmallShm).
const fullEnv = "SIMPLER_SHM_SMALL_DEVICE"

// runOnSmallShm runs the test named test of the binary exe again, in a
// mount namespace of its own whose /dev/shm is a fresh tmpfs of size
// (e.g. "4m"), with fullEnv set; it returns the run's output. The host's
// /dev/shm is not touched: the mount is private to the namespace. It
// needs root (unshare -m).
func runOnSmallShm(t *testing.T, test, size string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs -o size=`+size+` tmpfs /dev/shm && exec "$0" -test.run='^`+test+`$' -test.v`, exe)
	cmd.Env = append(os.Environ(), fullEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the run on a %s /dev/shm failed: %v\n%s", size, err, out)
	}
	return string(out)
}

// Issue 23, point 5: an object the device has no room for is refused at
// Create, a RuntimeError naming the size asked and the space left, with
// nothing left behind; an object that was made has its pages, so filling
// it all cannot fault (SIGBUS) however full the device is afterwards.
func TestCreateOnAFullDevice(t *testing.T) {
	if os.Getenv(fullEnv) == "" {
		out := runOnSmallShm(t, "TestCreateOnAFullDevice", "4m")
		if !strings.Contains(out, "--- PASS: TestCreateOnAFullDevice") {
			t.Fatalf("the run on a small /dev/shm did not pass:\n%s", out)
		}
		return
	}
	small, err := Create("small", 3<<20)
	if err != nil {
		t.Fatalf("3 MiB on an empty 4 MiB device: %v", err)
	}
	defer small.Close()
	for _, size := range []int{2 << 20, 8 << 20} {
		seg, err := Create("big", size)
		if err == nil {
			seg.Close()
			t.Fatalf("Create of %d bytes on a device with 1 MiB left succeeded", size)
		}
		if kind.Of(err) != kind.RuntimeError || !errors.Is(err, unix.ENOSPC) {
			t.Errorf("Create of %d bytes: %v (kind %s), want a RuntimeError wrapping ENOSPC", size, err, kind.Of(err))
		}
		left := spaceLeft()
		for _, want := range []string{strconv.Itoa(size) + " bytes", "(" + strconv.FormatInt(left, 10) + " bytes left)"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Create of %d bytes: %q does not say %q", size, err, want)
			}
		}
		if got, _ := Leftovers(Prefix()); len(got) != 1 || got[0] != small.Name {
			t.Errorf("after the refusal /dev/shm holds %v, want only %s", got, small.Name)
		}
	}
	// A named object is reserved the same way.
	if seg, err := CreateNamed(Prefix()+"named-full", 2<<20); err == nil {
		seg.Close()
		t.Error("CreateNamed of 2 MiB with 1 MiB left succeeded")
	} else if kind.Of(err) != kind.RuntimeError {
		t.Errorf("CreateNamed: %v, want a RuntimeError", err)
	}
	// The pages of what was made are there: fill the whole of it, then
	// take the rest of the device, and read it back.
	for i := range small.Mem {
		small.Mem[i] = byte(i)
	}
	rest, err := Create("rest", int(spaceLeft()))
	if err != nil {
		t.Fatalf("the rest of the device (%d bytes): %v", spaceLeft(), err)
	}
	defer rest.Close()
	clear(rest.Mem)
	for i, b := range small.Mem {
		if b != byte(i) {
			t.Fatalf("byte %d of the small object is %d after the device filled", i, b)
		}
	}
}

// BenchmarkCreateClose is the cost of making, mapping and removing one
// object, reservation (fallocate) included, for a small and a chunk-sized
// object.
func BenchmarkCreateClose(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 4 << 20} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			for range b.N {
				seg, err := Create("bench", size)
				if err != nil {
					b.Fatal(err)
				}
				seg.Close()
			}
		})
	}
}
