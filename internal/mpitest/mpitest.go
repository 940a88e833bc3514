// Package mpitest is how tests reach Open MPI's mpirun, the launcher of
// worker groups (add_worker_group), and the one rule they follow when it
// is missing.
//
// The rule: a test that needs mpirun finds it with Find. Under CI (the
// environment variable CI set to anything but "", "0" or "false", as
// CI services set it; .ci/run installs Open MPI) a missing mpirun fails
// the test. On a developer's machine without it the test says so loudly
// on stderr, and runs what it can without a launcher: its ranks are
// started by the test itself (launcher="none"), which covers everything
// but mpirun.
//
// mpirun refuses to run as root unless told twice. Env is what a test
// adds to the environment of what it starts (a level-4 worker's process,
// so its launcher inherits it) to allow that: only in tests, only as
// root; the product never sets it.
package mpitest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// InCI reports whether the tests run under CI.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v != "" && v != "0" && v != "false"
}

// Env is the environment a test gives what it starts so that mpirun
// runs: Open MPI's two consents to running as root, when this process is
// root; nothing otherwise.
func Env() []string {
	if os.Geteuid() != 0 {
		return nil
	}
	return []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"}
}

// Find returns mpirun's path, or "" when it is not installed: then the
// test fails under CI, and otherwise it is told loudly that its launcher
// goes untested (it goes on without one).
func Find(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("mpirun")
	if err == nil {
		return path
	}
	if InCI() {
		t.Fatalf("mpirun (Open MPI) is not installed, and CI=%s requires it: .ci/run installs it (apt-get install -y openmpi-bin)", os.Getenv("CI"))
	}
	msg := fmt.Sprintf("%s: mpirun (Open MPI) is NOT INSTALLED: its ranks are started by the test (launcher=\"none\"); the mpirun launcher itself is untested here. Install openmpi-bin to test it (CI fails without it).", t.Name())
	fmt.Fprintf(os.Stderr, "\n!!!!!!!!\n!!! %s\n!!!!!!!!\n\n", msg)
	t.Log(msg)
	return ""
}
