package mpitest

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"testing"

	"simpler/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestInCI(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "false": false, "FALSE": false, "1": true, "true": true, "yes": true} {
		t.Setenv("CI", v)
		if InCI() != want {
			t.Errorf("CI=%q: InCI() = %v", v, !want)
		}
	}
}

func TestEnvOnlyForRoot(t *testing.T) {
	env := Env()
	if root := os.Geteuid() == 0; root != slices.Contains(env, "OMPI_ALLOW_RUN_AS_ROOT=1") || root != slices.Contains(env, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1") {
		t.Errorf("euid %d: Env() = %q", os.Geteuid(), env)
	}
}

// Find finds an installed mpirun, and under CI a missing one fails (a
// child test, run with a PATH that has no mpirun, reports it).
func TestFind(t *testing.T) {
	if os.Getenv("MPITEST_CHILD") != "" {
		Find(t)
		return
	}
	if p := Find(t); p == "" && InCI() {
		t.Fatal("Find returned no mpirun under CI without failing")
	}
	exe, _ := os.Executable()
	for _, ci := range []string{"1", ""} {
		cmd := exec.Command(exe, "-test.run=^TestFind$")
		cmd.Env = append(os.Environ(), "MPITEST_CHILD=1", "PATH="+t.TempDir(), "CI="+ci)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != (ci == "1") {
			t.Errorf("CI=%q without mpirun: failed=%v\n%s", ci, failed, out)
		}
		if want := map[string]string{"1": "CI=1 requires it", "": "NOT INSTALLED"}[ci]; !bytes.Contains(out, []byte(want)) {
			t.Errorf("CI=%q without mpirun: the output does not say %q:\n%s", ci, want, out)
		}
	}
}
