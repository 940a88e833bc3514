package remote

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
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
