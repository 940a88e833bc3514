package slurmtest

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
)

// Config is what a single-host cluster's slurm.conf says.
type Config struct {
	Dir         string   // where state, spool, pid and log files go
	Host        string   // this host's short name: slurmctld runs only on the host it names
	User        string   // SlurmUser and SlurmdUser: the user the test runs as
	CPUs        int      // of each node
	CtldPort    int      // slurmctld's port on 127.0.0.1
	Nodes       []string // node names, one slurmd each
	NodePorts   []int    // each node's slurmd port on 127.0.0.1
	MungeSocket string   // the cluster's own munged
	// Loopback binds every daemon and srun to this host's address rather
	// than every interface. That address is what Host resolves to, so it
	// is set only when Host resolves to loopback alone (LoopbackOnly):
	// elsewhere srun would listen on another address than the 127.0.0.1
	// its job steps call it back at.
	Loopback bool
}

// LoopbackOnly reports whether a host's addresses are all loopback ones
// (and there is one).
func LoopbackOnly(addrs []string) bool {
	for _, a := range addrs {
		ip := net.ParseIP(a)
		if ip == nil || !ip.IsLoopback() {
			return false
		}
	}
	return len(addrs) > 0
}

// Text is slurm.conf. Every node is this host at 127.0.0.1 with a port
// of its own, and slurmctld is at 127.0.0.1 too, so that the cluster's
// traffic stays on loopback. Processes are tracked by their parents (linuxproc) and
// tasks are not confined (task/none): no cgroups, which containers often
// lack. Nothing is accounted. KillWait is short: a cancelled job's steps
// get SIGKILL two seconds after SIGTERM, so that teardown is quick.
func (c Config) Text() string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("# A single-host Slurm cluster of a test (internal/slurmtest).")
	line("ClusterName=simplertest")
	line("SlurmctldHost=%s(127.0.0.1)", c.Host)
	line("SlurmctldPort=%d", c.CtldPort)
	if c.Loopback {
		line("CommunicationParameters=NoCtldInAddrAny,NoInAddrAny")
	}
	line("SlurmUser=%s", c.User)
	line("SlurmdUser=%s", c.User)
	line("AuthType=auth/munge")
	line("CredType=cred/munge")
	line("AuthInfo=socket=%s", c.MungeSocket)
	line("ProctrackType=proctrack/linuxproc")
	line("TaskPlugin=task/none")
	line("JobAcctGatherType=jobacct_gather/none")
	line("AccountingStorageType=accounting_storage/none")
	line("JobCompType=jobcomp/none")
	line("SelectType=select/cons_tres")
	line("SelectTypeParameters=CR_CPU")
	line("MpiDefault=none")
	line("SwitchType=switch/none")
	line("ReturnToService=2")
	line("KillWait=2")
	line("StateSaveLocation=%s", filepath.Join(c.Dir, "state"))
	line("SlurmdSpoolDir=%s", filepath.Join(c.Dir, "spool-%n")) // spoolDirs
	line("SlurmctldPidFile=%s", filepath.Join(c.Dir, "slurmctld.pid"))
	line("SlurmdPidFile=%s", filepath.Join(c.Dir, "slurmd-%n.pid"))
	line("SlurmctldLogFile=%s", filepath.Join(c.Dir, "slurmctld.log"))
	line("SlurmdLogFile=%s", filepath.Join(c.Dir, "slurmd-%n.log"))
	for i, n := range c.Nodes {
		line("NodeName=%s NodeHostname=%s NodeAddr=127.0.0.1 Port=%d CPUs=%d State=UNKNOWN", n, c.Host, c.NodePorts[i], c.CPUs)
	}
	line("PartitionName=test Nodes=%s Default=YES MaxTime=INFINITE State=UP", strings.Join(c.Nodes, ","))
	return b.String()
}

// spoolDirs are the nodes' spool directories, in the cluster's
// directory, as SlurmdSpoolDir names them.
func spoolDirs(nodes []string) []string {
	var dirs []string
	for _, n := range nodes {
		dirs = append(dirs, "spool-"+n)
	}
	return dirs
}
