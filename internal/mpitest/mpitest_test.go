package mpitest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// NeedsMPI finds the scripts that start a worker group with mpirun: by
// its launcher= string, by the default, and by a launcher it cannot read.
func TestNeedsMPI(t *testing.T) {
	for src, want := range map[string]bool{
		`w.add_worker_group(ranks = 2, launcher = "mpirun")`:                                  true,
		`ids = w.add_worker_group(ranks = 2)`:                                                 true, // mpirun is the default
		`w.add_worker_group(ranks = 2, launcher = L)`:                                         true,
		`w.add_worker_group(ranks = 2, **kw)`:                                                 true,
		"def f(w):\n    return w.add_worker_group(ranks = 1,\n        launcher = 'mpirun')\n": true,
		`w.add_worker_group(ranks = 2, launcher = "none")`:                                    false,
		`w.add_worker_group(ranks = 2, launcher = "srun")`:                                    false,
		`w.add_remote_worker(endpoint = "127.0.0.1:7700")`:                                    false,
		`print("add_worker_group(ranks = 2)")`:                                                false, // text, not a call
		`# w.add_worker_group(ranks = 2)`:                                                     false,
		`w.add_worker_group(ranks = 2`:                                                        false, // does not parse: starts nothing
		`x = 1`:                                                                               false,
	} {
		if got := NeedsMPI([]byte(src)); got != want {
			t.Errorf("NeedsMPI(%q) = %v", src, got)
		}
	}
	b, err := os.ReadFile("../../scripts/examples/mpirun_group.star")
	if err != nil || !NeedsMPI(b) {
		t.Errorf("scripts/examples/mpirun_group.star: NeedsMPI false (%v)", err)
	}
}

// Script lets every script run where mpirun is installed; without it,
// one that needs mpirun fails the test under CI and is held back loudly
// elsewhere, while the others still run (child tests, with a PATH that
// has no mpirun, report what Script said).
func TestScript(t *testing.T) {
	dir := t.TempDir()
	group, plain := filepath.Join(dir, "group.star"), filepath.Join(dir, "plain.star")
	os.WriteFile(group, []byte("def main(ctx):\n    w = Worker(level = 4)\n    w.add_worker_group(ranks = 2, launcher = \"mpirun\")\n"), 0o600)
	os.WriteFile(plain, []byte("def main(ctx):\n    print(1)\n"), 0o600)
	if os.Getenv("MPITEST_SCRIPT_CHILD") != "" {
		fmt.Printf("plain=%v\n", Script(t, os.Getenv("MPITEST_PLAIN")))
		fmt.Printf("group=%v\n", Script(t, os.Getenv("MPITEST_GROUP")))
		return
	}
	if mpi := Find(t) != ""; Script(t, group) != mpi || !Script(t, plain) {
		t.Errorf("with mpirun installed: %v: Script(group) = %v, Script(plain) = %v", mpi, Script(t, group), Script(t, plain))
	}
	exe, _ := os.Executable()
	for _, ci := range []string{"1", ""} {
		cmd := exec.Command(exe, "-test.run=^TestScript$", "-test.v")
		cmd.Env = append(os.Environ(), "MPITEST_SCRIPT_CHILD=1", "MPITEST_PLAIN="+plain, "MPITEST_GROUP="+group, "PATH="+t.TempDir(), "CI="+ci)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != (ci == "1") {
			t.Errorf("CI=%q without mpirun: failed=%v\n%s", ci, failed, out)
		}
		want := map[string][]string{
			"1": {"plain=true", "CI=1 requires it"},
			"":  {"plain=true", "group=false", "!!! TestScript: mpirun (Open MPI) is NOT INSTALLED: " + group + " starts a worker group with mpirun, and is NOT RUN"},
		}[ci]
		for _, w := range want {
			if !bytes.Contains(out, []byte(w)) {
				t.Errorf("CI=%q without mpirun: the output does not say %q:\n%s", ci, w, out)
			}
		}
		if ci == "1" && bytes.Contains(out, []byte("group=")) {
			t.Errorf("CI=1 without mpirun: Script returned instead of failing the test:\n%s", out)
		}
	}
}
