package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// launchScript tries launcher_args that would make mpirun run something
// else, printing each refusal, then starts a group with allowed options
// and runs a task on its rank. %q is a file a program run by mpirun would
// create.
const launchScript = `MARKER = %q

def nothing(o, args, cfg):
    pass

def main(ctx):
    for args in [[":", "touch", MARKER], ["touch", MARKER], ["--prefix", "/opt/openmpi"],
                 ["-x", "LD_PRELOAD=" + MARKER], ["--mca", "plm_rsh_agent", "touch"], ["--map-by", MARKER]]:
        w = Worker(level = 4, platform = ctx.platform)
        print(catch(w.add_worker_group, ranks = 1, platform = ctx.platform, launcher_args = args))
        w.close()
    w = Worker(level = 4, platform = ctx.platform)
    ids = w.add_worker_group(ranks = 1, platform = ctx.platform, launcher_args = ["--map-by", "node", "-x", "SIMPLER_T", "--mca", "btl", "^openib"])
    w.register(nothing)
    w.init()
    w.run(lambda o, a, c: o.submit_next_level(nothing, TaskArgs(), worker = ids[0]))
    print("group ran")
    w.close()
`

// fakeMPI is an mpirun that writes its arguments to a file, then runs
// the rank program it was given (the arguments from the simpler binary
// on) as rank 0: enough to see what reached the launcher, and that a
// group with allowed launcher_args is still served.
const fakeMPI = `#!/bin/sh
echo "$@" >> %q
while [ $# -gt 0 ] && [ "$1" != %q ]; do shift; done
OMPI_COMM_WORLD_RANK=0 exec "$@"
`

// The real binary refuses launcher_args that would run a program or name
// a file (':' and a program after it, a program, --prefix DIR, -x
// LD_PRELOAD=..., an MCA agent, a path as a value) with a ValueError
// naming the argument, before any launcher starts; a group with allowed
// options starts right after, and its launcher gets exactly them.
func TestRunRefusesLauncherArgs(t *testing.T) {
	dir := t.TempDir()
	exe, _ := os.Executable()
	marker := filepath.Join(dir, "ran")
	argvFile := filepath.Join(dir, "mpirun-argv")
	bin := filepath.Join(dir, "bin")
	writeFiles(t, dir, map[string]string{
		"l.star":     fmt.Sprintf(launchScript, marker),
		"bin/mpirun": fmt.Sprintf(fakeMPI, argvFile, exe),
	})
	if err := os.Chmod(filepath.Join(bin, "mpirun"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := exec.Command(exe, "run", "--devices", "0", "l.star")
	run.Dir, run.Env = dir, cliEnv("NO_COLOR=1", "PATH="+bin+":"+os.Getenv("PATH"))
	out, err := run.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("simpler run: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	want := []string{
		`ValueError: add_worker_group: launcher_args[0] = ":": ':' starts another program for mpirun to run`,
		`ValueError: add_worker_group: launcher_args[0] = "touch": not an option`,
		`ValueError: add_worker_group: launcher_args[0] = "--prefix": --prefix is not among the mpirun options`,
		`ValueError: add_worker_group: launcher_args[0] = "-x": -x LD_PRELOAD=`,
		`ValueError: add_worker_group: launcher_args[0] = "--mca": --mca plm_rsh_agent touch: the MCA parameter "plm_rsh_agent" is not among`,
		`ValueError: add_worker_group: launcher_args[0] = "--map-by": --map-by ` + marker + `: a value must start with`,
		"group ran",
	}
	if len(lines) != len(want) {
		t.Fatalf("stdout:\n%s", out)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %s\nwant it to start with %s", i, lines[i], w)
		}
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused launcher_args ran something: %s: %v", marker, err)
	}
	argv, err := os.ReadFile(argvFile)
	if err != nil {
		t.Fatal(err)
	}
	launches := strings.Split(strings.TrimSuffix(string(argv), "\n"), "\n")
	if len(launches) != 1 || !strings.HasPrefix(launches[0], "-np 1 --bind-to none --map-by node -x SIMPLER_T --mca btl ^openib "+exe+" remote-l3-worker --connect ") {
		t.Errorf("the launcher ran with:\n%s\nwant once, with the allowed options", argv)
	}
}
