// Package slurmtest starts a real Slurm cluster on this one host for a
// test, and follows the rule internal/mpitest follows for mpirun when
// Slurm is missing.
//
// The cluster: Debian's slurmctld and one slurmd per Slurm node, each a
// node of its own on this host (slurmd -N: Debian builds Slurm with
// multiple-slurmd support), and a munged of their own for auth/munge.
// (Slurm's own auth/slurm, which needs no munge, came with Slurm 23.11;
// Debian 12 ships 22.05.) Everything lives in a temporary directory:
// slurm.conf (read with -f by the daemons and through $SLURM_CONF by the
// clients), the munge key, socket and seed, the state and spool
// directories, pid and log files. Nothing under /etc is read or written
// (Debian's /etc/slurm holds only plugstack.conf, which is not read: a
// plugstack.conf is looked for beside slurm.conf). Every node and
// slurmctld are at 127.0.0.1, on free ports; where this host's name
// resolves to loopback alone, the daemons and srun bind that address,
// not every interface (CommunicationParameters=NoCtldInAddrAny,
// NoInAddrAny; Config.Loopback says why not elsewhere).
//
// Start starts it, ready when sinfo says every node is idle, and
// registers its teardown with t.Cleanup, so that it goes even when the
// test fails: jobs cancelled, daemons stopped (SIGTERM, then SIGKILL
// after a bound), every process that carries the cluster's slurm.conf in
// its environment gone (job steps outlive slurmd by design), every file
// removed.
//
// The rule: Start needs munged, slurmctld, slurmd, slurmstepd, sinfo,
// squeue, scancel, srun and sbatch. Under CI (mpitest.InCI; .ci/run
// installs them) one that is missing fails the test. On a developer's
// machine without them the test is told so in one loud line on stderr,
// and Start returns nil: the test returns, claiming nothing.
package slurmtest

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"simpler/internal/mpitest"
)

// Bounds of start-up and teardown. A cluster is idle within a few
// seconds; the bounds are for a loaded machine.
const (
	readyBound = 30 * time.Second // until sinfo says every node is idle
	stopBound  = 10 * time.Second // from SIGTERM to SIGKILL, and for jobs to go
	queryBound = 10 * time.Second // one sinfo, squeue or scancel
)

// Programs are what Start needs, daemons and clients.
var Programs = []string{"munged", "slurmctld", "slurmd", "slurmstepd", "sinfo", "squeue", "scancel", "srun", "sbatch"}

// Packages are the Debian packages that have them (.ci/run installs
// them).
const Packages = "slurmctld slurmd slurm-client munge"

// Cluster is a running single-host Slurm cluster.
type Cluster struct {
	Dir   string   // the temporary directory that holds everything
	Conf  string   // slurm.conf's path
	Nodes []string // the Slurm node names, one slurmd each
	// Loopback says the daemons and srun listen on 127.0.0.1 alone
	// (Config.Loopback).
	Loopback bool

	paths   map[string]string // program → path
	daemons []*daemon         // in start order
}

// Env is what a test adds to the environment of a Slurm client it runs
// (srun, sbatch, or simpler run, whose srun inherits it).
func (c *Cluster) Env() []string { return []string{"SLURM_CONF=" + c.Conf} }

// Path is where a program of Programs is.
func (c *Cluster) Path(program string) string { return c.paths[program] }

// Find returns the path of each of Programs, or nil when one is missing:
// then the test fails under CI, and is otherwise told loudly that it
// tests no Slurm here.
func Find(t testing.TB) map[string]string {
	t.Helper()
	paths, missing := lookPaths(Programs)
	if len(missing) == 0 {
		return paths
	}
	if mpitest.InCI() {
		t.Fatalf("Slurm is not installed (no %s), and CI=%s requires it: .ci/run installs it (apt-get install -y %s)", strings.Join(missing, ", "), os.Getenv("CI"), Packages)
		return nil
	}
	msg := fmt.Sprintf("%s: Slurm is NOT INSTALLED (no %s): the srun launcher is untested here against a real Slurm. Install %s to test it (CI fails without it).", t.Name(), strings.Join(missing, ", "), Packages)
	fmt.Fprintf(os.Stderr, "\n!!!!!!!!\n!!! %s\n!!!!!!!!\n\n", msg)
	t.Log(msg)
	return nil
}

// lookPaths finds programs on PATH, and daemons in /usr/sbin too (a
// user's PATH may not have it).
func lookPaths(programs []string) (paths map[string]string, missing []string) {
	paths = map[string]string{}
	for _, p := range programs {
		path, err := exec.LookPath(p)
		if err != nil {
			path, err = exec.LookPath(filepath.Join("/usr/sbin", p))
		}
		if err != nil {
			missing = append(missing, p)
			continue
		}
		paths[p] = path
	}
	return paths, missing
}

// Start starts a cluster of nodes Slurm nodes on this host and returns it
// once every node is idle, or nil (the test returns) when Slurm is not
// installed outside CI. Any failure to start fails the test, after
// tearing down what had started.
func Start(t *testing.T, nodes int) *Cluster {
	t.Helper()
	paths := Find(t)
	if paths == nil {
		return nil
	}
	dir, err := os.MkdirTemp("", "slurm")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), paths: paths}
	t.Cleanup(func() { c.stop(t) })
	cfg, err := newConfig(dir, nodes)
	if err != nil {
		t.Fatal(err)
	}
	c.Nodes, c.Loopback = cfg.Nodes, cfg.Loopback
	for _, sub := range append([]string{"state"}, spoolDirs(c.Nodes)...) {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.startMunge(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.Conf, []byte(cfg.Text()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.start("slurmctld", "slurmctld", "-D", "-f", c.Conf); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if err := c.start("slurmd-"+n, "slurmd", "-D", "-f", c.Conf, "-N", n); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.waitIdle(); err != nil {
		t.Fatal(err)
	}
	return c
}

// newConfig is a cluster's configuration: this host's name, its CPUs on
// each node, the current user as Slurm's, and free ports of 127.0.0.1.
func newConfig(dir string, nodes int) (Config, error) {
	host, err := os.Hostname()
	if err != nil {
		return Config{}, err
	}
	host, _, _ = strings.Cut(host, ".")
	u, err := user.Current()
	if err != nil {
		return Config{}, err
	}
	ports, err := freePorts(1 + nodes)
	if err != nil {
		return Config{}, err
	}
	// Slurm resolves this host's name itself (srun, to listen on its
	// address); this looks it up the same way.
	addrs, _ := net.LookupHost(host)
	// Each node has every CPU this process may run on (runtime.NumCPU
	// counts them as nproc does): one configured with more than slurmd
	// finds would be drained.
	cfg := Config{Dir: dir, Host: host, User: u.Username, CPUs: runtime.NumCPU(), CtldPort: ports[0], NodePorts: ports[1:],
		MungeSocket: filepath.Join(dir, "munge.sock"), Loopback: LoopbackOnly(addrs)}
	for i := range nodes {
		cfg.Nodes = append(cfg.Nodes, fmt.Sprintf("n%d", i+1))
	}
	return cfg, nil
}

// freePorts picks n distinct free TCP ports of 127.0.0.1, holding each
// until all are picked.
func freePorts(n int) ([]int, error) {
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startMunge writes a munge key (mode 0600) and starts munged on a
// socket of the cluster's directory, returning once the socket is there.
// --force: munged refuses a socket whose directory is not searchable by
// everyone, and the tests' temporary directories are private.
func (c *Cluster) startMunge(cfg Config) error {
	key := make([]byte, 128)
	rand.Read(key) // never fails: crypto/rand crashes the program rather than return short
	keyFile := filepath.Join(c.Dir, "munge.key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		return err
	}
	err := c.start("munged", "munged", "--foreground", "--force", "--socket="+cfg.MungeSocket, "--key-file="+keyFile,
		"--pid-file="+filepath.Join(c.Dir, "munged.pid"), "--log-file="+filepath.Join(c.Dir, "munged.log"),
		"--seed-file="+filepath.Join(c.Dir, "munged.seed"))
	if err != nil {
		return err
	}
	d := c.daemons[len(c.daemons)-1]
	return poll(readyBound, func() (bool, error) {
		if d.exited() {
			return false, fmt.Errorf("munged exited before its socket was there: %s", tail(d.log, 20))
		}
		_, err := os.Stat(cfg.MungeSocket)
		return err == nil, nil
	}, "munged's socket "+cfg.MungeSocket)
}

// waitIdle waits until sinfo says every node is idle, or a daemon exits.
func (c *Cluster) waitIdle() error {
	last := ""
	err := poll(readyBound, func() (bool, error) {
		for _, d := range c.daemons {
			if d.exited() {
				return false, fmt.Errorf("%s exited before the cluster was ready: %s", d.name, tail(d.log, 20))
			}
		}
		out, err := c.Run("sinfo", "--noheader", "--Node", "--format=%N %T")
		last = strings.TrimSpace(out)
		return err == nil && AllIdle(out, c.Nodes), nil
	}, "every node idle")
	if err != nil && last != "" {
		return fmt.Errorf("%v; sinfo said %q", err, last)
	}
	return err
}

// AllIdle reports whether sinfo's "%N %T" lines, one per node, say every
// one of nodes is idle.
func AllIdle(sinfo string, nodes []string) bool {
	state := map[string]string{}
	for _, l := range strings.Split(sinfo, "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			state[f[0]] = f[1]
		}
	}
	for _, n := range nodes {
		if state[n] != "idle" {
			return false
		}
	}
	return len(nodes) > 0
}

// Run runs a Slurm client (sinfo, squeue, scancel, ...) on the cluster,
// bounded, and returns what it printed.
func (c *Cluster) Run(program string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), queryBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.paths[program], args...)
	cmd.Env = append(os.Environ(), c.Env()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", program, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// WaitJob waits, within bound, for the job id to end, and returns the
// state it ended in (COMPLETED, FAILED, CANCELLED, TIMEOUT, ...), as
// squeue has it for MinJobAge (five minutes) after it ends.
func (c *Cluster) WaitJob(id string, bound time.Duration) (string, error) {
	state := ""
	err := poll(bound, func() (bool, error) {
		out, err := c.Run("squeue", "--noheader", "--states=all", "--jobs="+id, "--format=%T")
		state = strings.TrimSpace(out)
		return err == nil && JobEnded(state), nil
	}, "job "+id+" to end")
	return state, err
}

// JobEnded reports whether squeue's state of a job (%T) is one it ends
// in.
func JobEnded(state string) bool {
	switch state {
	case "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY":
		return true
	}
	return false
}

// poll calls ready until it says so, fails, or bound passes.
func poll(bound time.Duration, ready func() (bool, error), what string) error {
	deadline := time.Now().Add(bound)
	for {
		ok, err := ready()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still waiting for %s after %v", what, bound)
		}
		time.Sleep(50 * time.Millisecond) // polling a daemon's state, not waiting for work
	}
}
