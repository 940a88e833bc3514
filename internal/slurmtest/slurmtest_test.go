package slurmtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"simpler/internal/leakcheck"
	"simpler/internal/mpitest"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// slurm.conf keeps everything in the directory, on 127.0.0.1, with no
// cgroups and munge on the cluster's own socket.
func TestConfigText(t *testing.T) {
	cfg := Config{Dir: "/d", Host: "h", User: "u", CPUs: 3, CtldPort: 7001, Nodes: []string{"n1", "n2"}, NodePorts: []int{7002, 7003}, MungeSocket: "/d/munge.sock", Loopback: true}
	text := cfg.Text()
	for _, want := range []string{
		"SlurmctldHost=h(127.0.0.1)\n", "SlurmctldPort=7001\n", "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny\n",
		"SlurmUser=u\n", "AuthType=auth/munge\n", "AuthInfo=socket=/d/munge.sock\n",
		"ProctrackType=proctrack/linuxproc\n", "TaskPlugin=task/none\n",
		"StateSaveLocation=/d/state\n", "SlurmdSpoolDir=/d/spool-%n\n",
		"NodeName=n1 NodeHostname=h NodeAddr=127.0.0.1 Port=7002 CPUs=3 State=UNKNOWN\n",
		"NodeName=n2 NodeHostname=h NodeAddr=127.0.0.1 Port=7003 CPUs=3 State=UNKNOWN\n",
		"PartitionName=test Nodes=n1,n2 Default=YES",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("slurm.conf has no %q:\n%s", want, text)
		}
	}
	for _, l := range strings.Split(text, "\n") {
		if i := strings.Index(l, "=/"); i >= 0 && !strings.HasPrefix(l[i:], "=/d/") {
			t.Errorf("slurm.conf names a path outside its directory: %q", l)
		}
	}
	if strings.Contains(text, "cgroup") {
		t.Errorf("slurm.conf uses cgroups:\n%s", text)
	}
	cfg.Loopback = false
	if text := cfg.Text(); strings.Contains(text, "InAddrAny") {
		t.Errorf("slurm.conf binds loopback on a host whose name does not resolve to it:\n%s", text)
	}
}

func TestLoopbackOnly(t *testing.T) {
	for _, c := range []struct {
		addrs []string
		want  bool
	}{
		{[]string{"127.0.0.1"}, true},
		{[]string{"127.0.1.1", "::1"}, true},
		{[]string{"127.0.0.1", "10.0.0.5"}, false},
		{[]string{"10.0.0.5"}, false},
		{[]string{"not an address"}, false},
		{nil, false},
	} {
		if got := LoopbackOnly(c.addrs); got != c.want {
			t.Errorf("LoopbackOnly(%q) = %v", c.addrs, got)
		}
	}
}

func TestAllIdle(t *testing.T) {
	nodes := []string{"n1", "n2"}
	for out, want := range map[string]bool{
		"n1 idle\nn2 idle\n":          true,
		"n2 idle\nn1 idle":            true,
		"n1 idle\n":                   false,
		"n1 idle\nn2 unknown\n":       false,
		"n1 idle\nn2 down*\n":         false,
		"n1 idle\nn2 idle\nn3 down\n": true, // another node's state is no matter
		"":                            false,
		"slurm_load_node: error":      false,
	} {
		if got := AllIdle(out, nodes); got != want {
			t.Errorf("AllIdle(%q) = %v", out, got)
		}
	}
	if AllIdle("", nil) {
		t.Error("a cluster of no nodes is idle")
	}
}

// Find finds an installed Slurm, and under CI a missing one fails (a
// child test, run with a PATH that has no Slurm client, reports it).
func TestFind(t *testing.T) {
	if os.Getenv("SLURMTEST_CHILD") != "" {
		Find(t)
		return
	}
	if p := Find(t); p == nil && mpitest.InCI() {
		t.Fatal("Find returned no Slurm under CI without failing")
	}
	exe, _ := os.Executable()
	for _, ci := range []string{"1", ""} {
		cmd := exec.Command(exe, "-test.run=^TestFind$")
		cmd.Env = append(os.Environ(), "SLURMTEST_CHILD=1", "PATH="+t.TempDir(), "CI="+ci)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != (ci == "1") {
			t.Errorf("CI=%q without Slurm: failed=%v\n%s", ci, failed, out)
		}
		if want := map[string]string{"1": "CI=1 requires it", "": "!!! TestFind: Slurm is NOT INSTALLED (no "}[ci]; !bytes.Contains(out, []byte(want)) {
			t.Errorf("CI=%q without Slurm: the output does not say %q:\n%s", ci, want, out)
		}
	}
}

// A real cluster of two nodes on this host: ready when both are idle,
// srun runs a task on each with its $SLURM_PROCID, and teardown leaves
// nothing, not even a job still running when the test ends.
func TestStartAndStop(t *testing.T) {
	var c *Cluster
	t.Run("cluster", func(t *testing.T) {
		c = Start(t, 2)
		if c == nil {
			return
		}
		out, err := c.Run("sinfo", "--noheader", "--Node", "--format=%N %T")
		if err != nil || !AllIdle(out, []string{"n1", "n2"}) {
			t.Fatalf("sinfo after Start: %v\n%s", err, out)
		}
		out, err = c.Run("srun", "--ntasks", "2", "--ntasks-per-node=1", "sh", "-c", `echo "$SLURM_PROCID $SLURMD_NODENAME"`)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		slices.Sort(lines)
		if err != nil || !slices.Equal(lines, []string{"0 n1", "1 n2"}) {
			t.Errorf("srun of two tasks, one per node: %v\n%s", err, out)
		}
		if c.Loopback {
			for _, d := range c.daemons {
				addrs := listening(t, d.cmd.Process.Pid)
				if d.name != "munged" && len(addrs) == 0 {
					t.Errorf("%s listens nowhere", d.name)
				}
				for _, a := range addrs {
					if !strings.HasPrefix(a, "0100007F:") {
						t.Errorf("%s listens on %s (hex, as /proc/net/tcp has it), not 127.0.0.1", d.name, a)
					}
				}
			}
		} else {
			t.Logf("this host's name does not resolve to loopback alone: the daemons listen on every interface")
		}
		// A job that would outlive the test: teardown cancels it.
		if _, err := c.Run("sbatch", "--nodes=1", "--output=/dev/null", "--wrap", "exec sleep 300"); err != nil {
			t.Fatal(err)
		}
		err = poll(readyBound, func() (bool, error) {
			out, err := c.Run("squeue", "--noheader", "--format=%T")
			return err == nil && strings.TrimSpace(out) == "RUNNING", nil
		}, "the sleeping job to run")
		if err != nil {
			t.Fatal(err)
		}
	})
	if c == nil {
		return
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("the cluster's directory is still there: %v", err)
	}
	for _, d := range c.daemons {
		if !d.exited() {
			t.Errorf("%s still runs", d.name)
		}
	}
	if left := marked([]byte("SLURM_CONF=" + c.Conf + "\x00")); len(left) > 0 {
		t.Errorf("processes of the cluster still run: %v", left)
	}
	if filepath.Dir(c.Dir) != os.TempDir() {
		t.Errorf("the cluster lived in %s, outside the tests' temporary directory", c.Dir)
	}
}

// listening lists the local addresses (hex, as /proc/net/tcp and tcp6
// write them) of the TCP sockets pid listens on.
func listening(t *testing.T, pid int) []string {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(l, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var addrs []string
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(table)
		for _, l := range strings.Split(string(b), "\n")[1:] {
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
			if f := strings.Fields(l); len(f) >= 10 && f[3] == "0A" && inodes[f[9]] {
				addrs = append(addrs, f[1])
			}
		}
	}
	return addrs
}

// A test that fails while its cluster runs a job still leaves nothing:
// t.Cleanup tears the cluster down (a child test, failing on purpose,
// reports it; its own leakcheck finds no child process left, and no
// process of its cluster runs after it).
func TestStopWhenTheTestFails(t *testing.T) {
	if os.Getenv("SLURMTEST_FAIL_CHILD") != "" {
		c := Start(t, 1)
		if c == nil {
			return
		}
		if _, err := c.Run("sbatch", "--output=/dev/null", "--wrap", "exec sleep 300"); err != nil {
			t.Fatal(err)
		}
		err := poll(readyBound, func() (bool, error) {
			out, err := c.Run("squeue", "--noheader", "--format=%T")
			return err == nil && strings.TrimSpace(out) == "RUNNING", nil
		}, "the sleeping job to run")
		t.Fatalf("failing on purpose, a job running (%v)", err)
	}
	if Find(t) == nil {
		return
	}
	exe, _ := os.Executable()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestStopWhenTheTestFails$", "-test.v")
	cmd.Env = append(os.Environ(), "SLURMTEST_FAIL_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("failing on purpose, a job running (<nil>)")) || !bytes.Contains(out, []byte("--- FAIL: TestStopWhenTheTestFails")) {
		t.Errorf("the child test did not fail as it should, a job running: %v\n%s", err, out)
	}
	if bytes.Contains(out, []byte("leakcheck:")) {
		t.Errorf("the failed test left something behind:\n%s", out)
	}
	// Its clusters lived under this binary's temporary directory.
	if left := marked([]byte("SLURM_CONF=" + os.TempDir() + "/")); len(left) > 0 {
		t.Errorf("processes of the failed test's cluster still run: %v", left)
	}
}
