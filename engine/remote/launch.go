package remote

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"simpler/engine"
	"simpler/internal/token"
)

// rankArgs are the arguments every rank of a group is started with, after
// the rank program: where to dial, the token's file, what to offer, and
// how long to try. The rank's number comes from its launcher's
// environment (RankFromEnv).
func rankArgs(spec engine.GroupSpec, connect, tokenFile string, timeout time.Duration) []string {
	devs := make([]string, len(spec.DeviceIDs))
	for i, d := range spec.DeviceIDs {
		devs[i] = strconv.Itoa(d)
	}
	return []string{"--connect", connect, "--token-file", tokenFile, "--platform", spec.Platform,
		"--devices", strings.Join(devs, ","), "--connect-timeout", timeout.Round(time.Millisecond).String()}
}

// launchArgs is the launcher's command line: the launcher, the number of
// ranks and their hosts, the user's launcher_args, then the rank program
// (rank, e.g. "/usr/bin/simpler remote-l3-worker") and its arguments. On
// a group that listens on loopback with no hosts named, every rank runs
// on this host, so mpirun is allowed to place more ranks than cores
// (--oversubscribe) unless launcher_args say how to map them.
//
// mpirun binds each rank to one core when it starts two or fewer (to a
// socket otherwise): right for an MPI process that computes, wrong for a
// rank, which is a whole level-3 node — its session process, every chip's
// and SUB worker's goroutines — and which Go then runs on that one core
// alone (GOMAXPROCS follows the affinity). A no-op task on a bound rank
// took 2.7-3.9 times as long as on a daemon's node (docs/performance.md).
// So ranks are not bound (--bind-to none) unless launcher_args say how.
func launchArgs(spec engine.GroupSpec, rank []string, loopback bool) []string {
	var argv []string
	switch spec.Launcher {
	case engine.LauncherMPI:
		argv = []string{"mpirun", "-np", strconv.Itoa(spec.Ranks)}
		if len(spec.Hosts) > 0 {
			argv = append(argv, "--host", strings.Join(spec.Hosts, ","))
		} else if loopback && !mapsRanks(spec.LauncherArgs) {
			argv = append(argv, "--oversubscribe")
		}
		if !bindsRanks(spec.LauncherArgs) {
			argv = append(argv, "--bind-to", "none")
		}
	case engine.LauncherSlurm:
		argv = []string{"srun", "--ntasks", strconv.Itoa(spec.Ranks)}
		if len(spec.Hosts) > 0 {
			argv = append(argv, "--nodelist", strings.Join(spec.Hosts, ","))
		}
	}
	argv = append(argv, spec.LauncherArgs...)
	return append(argv, rank...)
}

// mapsRanks reports whether mpirun arguments already say how ranks map to
// slots.
func mapsRanks(args []string) bool {
	return hasFlag(args, "--oversubscribe", "-oversubscribe", "--map-by", "-map-by", "--host", "-host", "-H", "--hostfile", "-hostfile", "--machinefile")
}

// bindsRanks reports whether mpirun arguments already say how ranks bind
// to cores.
func bindsRanks(args []string) bool {
	return hasFlag(args, "--bind-to", "-bind-to", "--cpu-set", "-cpu-set", "--cpu-list", "-cpu-list", "--rankfile", "-rankfile", "-rf")
}

// hasFlag reports whether args hold one of flags, alone or as flag=value.
func hasFlag(args []string, flags ...string) bool {
	for _, a := range args {
		for _, f := range flags {
			if a == f || strings.HasPrefix(a, f+"=") {
				return true
			}
		}
	}
	return false
}

// A worker group's launcher_args reach a program that starts other
// programs: mpirun takes ':' and then another program to run, options
// that name programs and files (--prefix, --hostfile, --mca
// plm_rsh_agent, --tune), and -x LD_PRELOAD=... sets what every rank
// loads. So launcher_args are checked against a short allow-list per
// launcher, never spliced as given: each argument is an option below (as
// -name, --name or --name=value), or the value of the one before it, and
// a value is a word (letters, digits and _.,:=^+%-, starting with a
// letter, a digit or '^'), never a path. Anything else is a ValueError
// naming the argument and why. CheckGroupLaunch is the check;
// docs/cluster.md lists the options.

// launchOption is an option launcher_args may pass: how many values
// follow it, and which values are allowed (nil: each a word).
type launchOption struct {
	values int
	allow  func(values []string) string // why the values are refused, or ""
}

// mpirunOptions are the Open MPI mpirun options launcher_args may pass:
// placement, binding, output, root's consent, a variable of simpler's
// environment by name, and the MCA parameters of transports and
// placement, none of which names a program or a file.
var mpirunOptions = map[string]launchOption{
	"allow-run-as-root": {}, "oversubscribe": {}, "nooversubscribe": {},
	"report-bindings": {}, "tag-output": {}, "timestamp-output": {},
	"display-map": {}, "use-hwthread-cpus": {}, "q": {}, "quiet": {},
	"bind-to": {values: 1}, "map-by": {values: 1}, "rank-by": {values: 1},
	"N": {values: 1}, "npernode": {values: 1}, "cpu-set": {values: 1}, "cpu-list": {values: 1},
	"x":   {values: 1, allow: envName},
	"mca": {values: 2, allow: mcaParam},
}

// srunOptions are the Slurm srun options launcher_args may pass: where
// and how long the ranks run, and how their output is labelled.
var srunOptions = map[string]launchOption{
	"exclusive": {}, "overcommit": {}, "O": {}, "label": {}, "l": {},
	"kill-on-bad-exit": {}, "K": {}, "unbuffered": {}, "u": {},
	"partition": {values: 1}, "p": {values: 1}, "time": {values: 1}, "t": {values: 1},
	"cpus-per-task": {values: 1}, "c": {values: 1}, "mem": {values: 1},
	"ntasks-per-node": {values: 1}, "nodes": {values: 1}, "N": {values: 1},
	"account": {values: 1}, "A": {values: 1}, "qos": {values: 1},
	"constraint": {values: 1}, "C": {values: 1}, "gres": {values: 1},
	"cpu-bind": {values: 1}, "mpi": {values: 1}, "job-name": {values: 1}, "J": {values: 1},
}

// mcaParams are the MCA parameters --mca may set: transports and
// placement, never an agent, a path or a file.
var mcaParams = map[string]bool{
	"btl": true, "pml": true, "mtl": true, "osc": true, "coll": true,
	"btl_tcp_if_include": true, "btl_tcp_if_exclude": true,
	"oob_tcp_if_include": true, "oob_tcp_if_exclude": true,
	"btl_vader_single_copy_mechanism": true, "btl_sm_single_copy_mechanism": true,
	"hwloc_base_binding_policy": true, "rmaps_base_mapping_policy": true,
	"rmaps_base_oversubscribe": true, "mpi_yield_when_idle": true,
}

// launchOptions are the allowed options of a launcher (nil for "none",
// which takes no launcher_args: the engine refuses them).
func launchOptions(launcher string) map[string]launchOption {
	switch launcher {
	case engine.LauncherMPI:
		return mpirunOptions
	case engine.LauncherSlurm:
		return srunOptions
	}
	return nil
}

// CheckGroupLaunch refuses a worker group whose hosts or launcher_args
// could make its launcher run something else than its ranks, or read a
// file: add_worker_group calls it before the engine takes the group.
func CheckGroupLaunch(spec engine.GroupSpec) error {
	const op = "add_worker_group"
	for i, h := range spec.Hosts {
		if why := word(h); why != "" {
			return engine.Errorf(engine.ValueError, "%s: hosts[%d] = %q: %s (a host name, optionally host:slots)", op, i, h, why)
		}
	}
	opts := launchOptions(spec.Launcher)
	if opts == nil {
		return nil
	}
	args := spec.LauncherArgs
	for i := 0; i < len(args); {
		n, err := checkLaunchArg(spec.Launcher, opts, args, i)
		if err != nil {
			return engine.Errorf(engine.ValueError, "%s: launcher_args[%d] = %q: %s", op, i, args[i], err)
		}
		i += n
	}
	return nil
}

// checkLaunchArg checks the option at args[i] with its values and returns
// how many arguments it took.
func checkLaunchArg(launcher string, opts map[string]launchOption, args []string, i int) (int, error) {
	a := args[i]
	if a == ":" {
		return 0, fmt.Errorf("':' starts another program for %s to run; launcher_args take only options, never a program", launcher)
	}
	name, inline, hasInline := optionName(a)
	if name == "" {
		return 0, fmt.Errorf("not an option: %s would take it for a program or a file to run; launcher_args take only options (docs/cluster.md lists them)", launcher)
	}
	opt, ok := opts[name]
	if !ok {
		return 0, fmt.Errorf("%s is not among the %s options launcher_args may pass (docs/cluster.md lists them); options that name a program or a file are never allowed", a, launcher)
	}
	taken, values := 1, []string{inline}
	switch {
	case hasInline && opt.values != 1:
		return 0, fmt.Errorf("%s takes %d value(s), not one after '='", name, opt.values)
	case opt.values == 0:
		return 1, nil
	case !hasInline && i+1+opt.values > len(args):
		return 0, fmt.Errorf("%s needs %d value(s) after it", a, opt.values)
	case !hasInline:
		taken, values = 1+opt.values, args[i+1:i+1+opt.values]
	}
	check := opt.allow
	if check == nil {
		check = words
	}
	if why := check(values); why != "" {
		return 0, fmt.Errorf("%s %s: %s", a, strings.Join(values, " "), why)
	}
	return taken, nil
}

// optionName is the name of option a ("--map-by=x" is map-by, with the
// value x), or "" when a is not an option.
func optionName(a string) (name, value string, hasValue bool) {
	if len(a) < 2 || a[0] != '-' {
		return "", "", false
	}
	name = strings.TrimPrefix(a[1:], "-")
	name, value, hasValue = strings.Cut(name, "=")
	return name, value, hasValue
}

// word says why v is not a plain word: empty, not starting with a letter,
// a digit or '^' (so not a flag, a path or a ':'), or holding a character
// beyond letters, digits and _.,:=^+%- (a '/' would make it a path).
func word(v string) string {
	if v == "" {
		return "an empty value"
	}
	if !isAlnum(v[0]) && v[0] != '^' {
		return "a value must start with a letter, a digit or '^' (not a flag, a path or ':')"
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !isAlnum(c) && !strings.ContainsRune("_.,:=^+%-", rune(c)) {
			return fmt.Sprintf("%q may not be in a value (letters, digits and _.,:=^+%%- only: never a path)", c)
		}
	}
	return ""
}

// words says why one of values is not a word.
func words(values []string) string {
	for _, v := range values {
		if why := word(v); why != "" {
			return why
		}
	}
	return ""
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// envName allows -x NAME: a variable of simpler's own environment passed
// on by name. -x NAME=VALUE would set one (LD_PRELOAD=... loads a file
// into every rank); set it in simpler's environment instead. The dynamic
// loader's variables are refused even by name.
func envName(values []string) string {
	v := values[0]
	if strings.Contains(v, "=") {
		return "-x passes a variable of simpler's environment by name only; set its value in the environment of simpler run"
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !isAlnum(c) && c != '_' || i == 0 && '0' <= c && c <= '9' {
			return "not a variable name"
		}
	}
	if v == "" {
		return "not a variable name"
	}
	if strings.HasPrefix(v, "LD_") {
		return "a variable of the dynamic loader names files every rank loads"
	}
	return ""
}

// mcaParam allows --mca KEY VALUE for the keys of mcaParams, with a word
// as the value.
func mcaParam(values []string) string {
	if key := values[0]; !mcaParams[key] {
		return fmt.Sprintf("the MCA parameter %q is not among those --mca may set (transports and placement: docs/cluster.md lists them)", key)
	}
	return word(values[1])
}

// isLoopbackAddr reports whether host:port listens on loopback only.
func isLoopbackAddr(addr string) bool {
	host, _, _ := strings.Cut(addr, ":")
	if strings.HasPrefix(addr, "[") {
		host, _, _ = strings.Cut(addr[1:], "]")
	}
	return token.IsLoopback(host)
}

// launcher is a group's launcher process, in a process group of its own
// so that ending it reaches what it started on this host.
type launcher struct {
	name   string // "mpirun"
	cmd    *exec.Cmd
	out    *tail         // the last lines it (and its ranks) wrote
	exited chan struct{} // closed when it has exited
	err    error         // how it exited, once exited is closed
}

// startLauncher starts argv with env added to this process's environment.
// Its output is kept (the last lines), not shown: it is what a failure
// names.
func startLauncher(argv, env []string) (*launcher, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, engine.Errorf(engine.RuntimeError, "launcher %q is not installed here (not found in $PATH)%s", argv[0], installHint(argv[0]))
	}
	l := &launcher{name: argv[0], out: &tail{}, exited: make(chan struct{})}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = l.out, l.out
	// Its own process group, so that ending it reaches what it started
	// here; and SIGTERM when this process dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// The ranks inherit its output: once it has exited, a rank still
	// writing must not hold Wait.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, engine.Errorf(engine.RuntimeError, "starting %s: %v", argv[0], err)
	}
	l.cmd = cmd
	go func() {
		l.err = cmd.Wait()
		close(l.exited)
	}()
	return l, nil
}

// rootConsentVars are Open MPI's two variables that together let mpirun
// run as root.
var rootConsentVars = []string{"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"}

// checkRootConsent refuses, before anything is started, a group that
// mpirun would refuse: this process is root (euid 0) and neither
// launcher_args' --allow-run-as-root nor both of Open MPI's variables (in
// this process's environment or env, which the launcher gets) consent.
// mpirun would only say so after the listener and the token were made;
// the refusal here says how to proceed. simpler never consents by itself.
func checkRootConsent(spec engine.GroupSpec, euid int, getenv func(string) string, env []string) error {
	if spec.Launcher != engine.LauncherMPI || euid != 0 || slices.Contains(spec.LauncherArgs, "--allow-run-as-root") {
		return nil
	}
	consented := true
	for _, name := range rootConsentVars {
		v := getenv(name)
		for _, kv := range env {
			if k, val, ok := strings.Cut(kv, "="); ok && k == name {
				v = val
			}
		}
		consented = consented && v != ""
	}
	if consented {
		return nil
	}
	return engine.Errorf(engine.RuntimeError,
		"mpirun refuses to run as root, and simpler runs as root here: to let it, put OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in simpler's environment, or give add_worker_group(..., launcher_args = [\"--allow-run-as-root\"]); or run simpler as another user")
}

func installHint(name string) string {
	switch name {
	case engine.LauncherMPI:
		return ": install Open MPI (Debian and Ubuntu: apt-get install openmpi-bin), or use launcher=\"none\" and start the ranks yourself"
	case engine.LauncherSlurm:
		return ": run inside a Slurm allocation (salloc, sbatch), or use launcher=\"none\""
	}
	return ""
}

// status says how the launcher exited; call it after exited is closed.
func (l *launcher) status() string {
	if l.err == nil {
		return "exited with status 0"
	}
	if e, ok := l.err.(*exec.ExitError); ok {
		if ws, ok := e.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "was killed by " + ws.Signal().String()
		}
		return fmt.Sprintf("exited with status %d", e.ExitCode())
	}
	return l.err.Error()
}

// end waits for the launcher to exit by itself until deadline, then asks
// its process group to stop (SIGTERM: mpirun ends its ranks), and kills
// the group a grace later. It reports whether the launcher had to be
// ended.
func (l *launcher) end(deadline time.Time) (forced bool) {
	select {
	case <-l.exited:
		return false
	case <-time.After(time.Until(deadline)):
	}
	pgid := l.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-l.exited:
	case <-time.After(killGrace):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-l.exited
	}
	return true
}

// tail keeps the last tailLines lines written to it, each cut to
// tailWidth bytes: a launcher's output, bounded however much it writes.
type tail struct {
	mu      sync.Mutex
	lines   []string
	partial []byte
}

const (
	tailLines = 30
	tailWidth = 400
)

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			t.partial = append(t.partial, p[:min(len(p), tailWidth-len(t.partial))]...)
			break
		}
		t.partial = append(t.partial, p[:min(i, max(0, tailWidth-len(t.partial)))]...)
		t.add(string(t.partial))
		t.partial = t.partial[:0]
		p = p[i+1:]
	}
	return n, nil
}

func (t *tail) add(line string) {
	if strings.TrimSpace(line) == "" || strings.Trim(line, "-") == "" {
		return // blank lines and Open MPI's rules say nothing
	}
	t.lines = append(t.lines, line)
	if len(t.lines) > tailLines {
		t.lines = t.lines[len(t.lines)-tailLines:]
	}
}

// String is the kept lines, each indented, with the partial last one.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := append([]string(nil), t.lines...)
	if len(t.partial) > 0 {
		lines = append(lines, string(t.partial))
	}
	if len(lines) == 0 {
		return ""
	}
	return "\n    " + strings.Join(lines, "\n    ")
}
