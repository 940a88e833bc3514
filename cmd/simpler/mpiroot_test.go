package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"simpler/internal/mpitest"
)

// withoutRootConsent is cliEnv without Open MPI's consents to running as
// root: the environment a user's shell gives simpler.
func withoutRootConsent() []string {
	var env []string
	for _, kv := range cliEnv("NO_COLOR=1") {
		if !strings.HasPrefix(kv, "OMPI_ALLOW_RUN_AS_ROOT") {
			env = append(env, kv)
		}
	}
	return env
}

const mpiNoConsentScript = `
def main(ctx):
    w = Worker(level = 4, platform = ctx.platform)
    w.add_worker_group(ranks = 1, launcher = "mpirun", device_ids = [0])
    w.init()
    print("ranks up")
    w.close()
`

// The shipped mpirun example runs bare, without Open MPI's variables,
// whoever runs it (as root it consents through launcher_args); a group
// that does not consent, run as root, fails at init() saying the two
// ways to consent, before mpirun is started. Not as root, it runs.
func TestMpirunAsRoot(t *testing.T) {
	if mpitest.Find(t) == "" {
		return // said loudly by Find; fails under CI
	}
	exe, _ := os.Executable()
	env := withoutRootConsent()
	example, _ := filepath.Abs("../../scripts/examples/mpirun_group.star")
	run := exec.Command(exe, "run", example)
	run.Env = env
	out, err := run.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "rank 1 chip 1 [30.0, 32.0, 34.0, 36.0]") {
		t.Fatalf("the example without OMPI_ALLOW_RUN_AS_ROOT: %v\n%s", err, out)
	}
	checkNoShm(t, env)

	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"g.star": mpiNoConsentScript})
	env = withoutRootConsent()
	run = exec.Command(exe, "run", "g.star")
	run.Dir, run.Env = dir, env
	out, err = run.CombinedOutput()
	if os.Geteuid() != 0 {
		if err != nil || !strings.Contains(string(out), "ranks up") {
			t.Fatalf("not root, a group without consent: %v\n%s", err, out)
		}
		return
	}
	for _, want := range []string{
		"RuntimeError: worker group 0: mpirun refuses to run as root",
		"OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
		`launcher_args = ["--allow-run-as-root"]`,
	} {
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("as root without consent: %v, want it to say %q:\n%s", err, want, out)
		}
	}
	if strings.Contains(string(out), "mpirun has detected") {
		t.Errorf("mpirun was started (its own refusal is in the output):\n%s", out)
	}
	checkNoShm(t, env)
}
