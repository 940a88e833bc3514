package remote

import (
	"strings"
	"testing"

	"simpler/engine"
)

// launcher_args pass only the allow-listed options of their launcher,
// each with word values; ':' (another program), a program, an option that
// names a program or a file, a path in a value, -x NAME=VALUE and an MCA
// parameter off the list are refused with a ValueError naming the
// argument. hosts are words too.
func TestCheckGroupLaunch(t *testing.T) {
	ok := []engine.GroupSpec{
		{Launcher: "mpirun", LauncherArgs: []string{"--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--map-by", "ppr:2:node", "-x", "SIMPLER_INJECT_FAULT"}},
		{Launcher: "mpirun", LauncherArgs: []string{"--mca", "btl", "^openib", "-mca", "btl_tcp_if_include", "eth0", "--bind-to=core", "-N", "2", "--cpu-set=0,1"}},
		{Launcher: "mpirun", Hosts: []string{"node1:2", "node-2.example:4"}},
		{Launcher: "srun", LauncherArgs: []string{"--ntasks-per-node=1", "--cpus-per-task=8", "-p", "debug", "--time", "1:00:00", "--exclusive"}},
		{Launcher: "none"}, // the engine refuses launcher_args for "none"
	}
	for _, spec := range ok {
		if err := CheckGroupLaunch(spec); err != nil {
			t.Errorf("%+v: %v", spec, err)
		}
	}
	refused := []struct {
		spec engine.GroupSpec
		want string
	}{
		{engine.GroupSpec{Launcher: "mpirun", LauncherArgs: []string{"--oversubscribe", ":", "touch", "x"}}, `launcher_args[1] = ":": ':' starts another program for mpirun to run`},
		{engine.GroupSpec{Launcher: "mpirun", LauncherArgs: []string{"touch"}}, `launcher_args[0] = "touch": not an option: mpirun would take it for a program or a file to run`},
		{engine.GroupSpec{Launcher: "mpirun", LauncherArgs: []string{"--prefix", "/opt/openmpi"}}, `launcher_args[0] = "--prefix": --prefix is not among the mpirun options launcher_args may pass`},
		{engine.GroupSpec{Launcher: "mpirun", LauncherArgs: []string{"--hostfile=hosts"}}, `--hostfile=hosts is not among the mpirun options`},
		{engine.GroupSpec{Launcher: "mpirun", LauncherArgs: []string{"--map-by", "/etc/passwd"}}, `--map-by /etc/passwd: a value must start with a letter, a digit or '^'`},
		{engine.GroupSpec{Launcher: "mpirun", LauncherArgs: []string{"--map-by", "a/b"}}, `'/' may not be in a value`},
		{engine.GroupSpec{Launcher: "mpirun", LauncherArgs: []string{"--bind-to"}}, `--bind-to needs 1 value(s) after it`},
		{engine.GroupSpec{Launcher: "mpirun", LauncherArgs: []string{"--bind-to", "--oversubscribe"}}, `a value must start with a letter`},
		{engine.GroupSpec{Launcher: "mpirun", LauncherArgs: []string{"-x", "LD_PRELOAD=/tmp/evil.so"}}, `-x passes a variable of simpler's environment by name only`},
		{engine.GroupSpec{Launcher: "mpirun", LauncherArgs: []string{"-x", "LD_LIBRARY_PATH"}}, `a variable of the dynamic loader`},
		{engine.GroupSpec{Launcher: "mpirun", LauncherArgs: []string{"--mca", "plm_rsh_agent", "sh"}}, `the MCA parameter "plm_rsh_agent" is not among those --mca may set`},
		{engine.GroupSpec{Launcher: "mpirun", LauncherArgs: []string{"--mca=btl"}}, `mca takes 2 value(s), not one after '='`},
		{engine.GroupSpec{Launcher: "srun", LauncherArgs: []string{"--task-prolog", "x"}}, `--task-prolog is not among the srun options`},
		{engine.GroupSpec{Launcher: "srun", LauncherArgs: []string{"--export=LD_PRELOAD=x"}}, `--export=LD_PRELOAD=x is not among the srun options`},
		{engine.GroupSpec{Launcher: "srun", Hosts: []string{"/etc/hosts"}}, `hosts[0] = "/etc/hosts": a value must start with a letter`},
		{engine.GroupSpec{Launcher: "mpirun", Hosts: []string{"-x"}}, `hosts[0] = "-x"`},
	}
	for _, c := range refused {
		err := CheckGroupLaunch(c.spec)
		if err == nil || !strings.HasPrefix(err.Error(), "ValueError: add_worker_group: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want a ValueError with %q", c.spec, err, c.want)
		}
	}
}

// checkRootConsent passes a group mpirun would run: not root, not
// mpirun, --allow-run-as-root, or both variables (from the environment or
// the launcher's env); otherwise it says how to consent.
func TestCheckRootConsent(t *testing.T) {
	none := func(string) string { return "" }
	both := func(k string) string { return "1" }
	one := func(k string) string {
		if k == "OMPI_ALLOW_RUN_AS_ROOT" {
			return "1"
		}
		return ""
	}
	mpi := engine.GroupSpec{Launcher: engine.LauncherMPI}
	flagged := engine.GroupSpec{Launcher: engine.LauncherMPI, LauncherArgs: []string{"--oversubscribe", "--allow-run-as-root"}}
	cases := []struct {
		spec   engine.GroupSpec
		euid   int
		getenv func(string) string
		env    []string
		refuse bool
	}{
		{mpi, 1000, none, nil, false},
		{engine.GroupSpec{Launcher: engine.LauncherSlurm}, 0, none, nil, false},
		{engine.GroupSpec{Launcher: engine.LauncherNone}, 0, none, nil, false},
		{flagged, 0, none, nil, false},
		{mpi, 0, both, nil, false},
		{mpi, 0, none, []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"}, false},
		{mpi, 0, one, []string{"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"}, false},
		{mpi, 0, none, nil, true},
		{mpi, 0, one, nil, true},
		{mpi, 0, none, []string{"OMPI_ALLOW_RUN_AS_ROOT=1"}, true},
	}
	for i, c := range cases {
		err := checkRootConsent(c.spec, c.euid, c.getenv, c.env)
		if (err != nil) != c.refuse {
			t.Errorf("case %d: %v, want refused %v", i, err, c.refuse)
			continue
		}
		if err != nil && (engine.KindOf(err) != engine.RuntimeError || !strings.Contains(err.Error(), "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1") || !strings.Contains(err.Error(), `launcher_args = ["--allow-run-as-root"]`)) {
			t.Errorf("case %d: %v", i, err)
		}
	}
}
