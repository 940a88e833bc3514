package slurmtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// daemon is one of the cluster's daemons, a child of the test in the
// foreground, in a process group of its own.
type daemon struct {
	name string
	cmd  *exec.Cmd
	log  string        // its stdout and stderr
	done chan struct{} // closed once it has exited and been waited for
}

// exited reports whether the daemon has exited.
func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// start starts program as the daemon name, its output in name.out of the
// cluster's directory, $SLURM_CONF set (so that its children, job steps
// among them, carry the cluster's mark: see sweep).
func (c *Cluster) start(name, program string, args ...string) error {
	out, err := os.Create(filepath.Join(c.Dir, name+".out"))
	if err != nil {
		return err
	}
	defer out.Close() // the child has its own copy
	cmd := exec.Command(c.paths[program], args...)
	cmd.Env = append(os.Environ(), c.Env()...)
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %v", name, err)
	}
	d := &daemon{name: name, cmd: cmd, log: out.Name(), done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(d.done)
	}()
	c.daemons = append(c.daemons, d)
	return nil
}

// stop tears the cluster down: every job cancelled, the daemons stopped
// (slurmds first, munged last), the processes that carry the cluster's
// mark waited for and, past a bound, killed, and every file removed. A
// failed test gets the daemons' last lines.
func (c *Cluster) stop(t *testing.T) {
	if c.running("slurmctld") {
		if _, err := c.Run("scancel", "--partition=test"); err != nil {
			t.Errorf("cancelling the cluster's jobs: %v", err)
		}
		err := poll(stopBound, func() (bool, error) {
			out, err := c.Run("squeue", "--noheader", "--format=%i")
			return err == nil && strings.TrimSpace(out) == "", nil
		}, "the cluster's jobs to end")
		if err != nil {
			t.Errorf("stopping the Slurm cluster: %v", err)
		}
	}
	for i := len(c.daemons) - 1; i >= 0; i-- {
		if err := c.daemons[i].stop(); err != nil {
			t.Errorf("stopping the Slurm cluster: %v", err)
		}
	}
	if left := c.sweep(); len(left) > 0 {
		t.Errorf("processes of the Slurm cluster left running after its daemons stopped, killed: %s", strings.Join(left, "; "))
	}
	if t.Failed() {
		for _, d := range c.daemons {
			t.Logf("%s's last lines:\n%s", d.name, tail(d.log, 30))
		}
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		t.Errorf("removing the Slurm cluster's files: %v", err)
	}
}

// running reports whether the daemon name was started and still runs.
func (c *Cluster) running(name string) bool {
	for _, d := range c.daemons {
		if d.name == name {
			return !d.exited()
		}
	}
	return false
}

// stop sends the daemon SIGTERM and waits for it; past stopBound its
// process group gets SIGKILL, and that is an error.
func (d *daemon) stop() error {
	if d.exited() {
		return nil
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(stopBound):
	}
	syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	<-d.done
	return fmt.Errorf("%s did not stop within %v of SIGTERM; killed", d.name, stopBound)
}

// sweep waits, within stopBound, for the processes that carry the
// cluster's mark ($SLURM_CONF of its slurm.conf, which every daemon, job
// step and task inherits; Slurm detaches job steps from slurmd, so they
// are no children of the test) to exit, then kills those left and names
// them.
func (c *Cluster) sweep() []string {
	mark := []byte("SLURM_CONF=" + c.Conf + "\x00")
	var left []int
	poll(stopBound, func() (bool, error) {
		left = marked(mark)
		return len(left) == 0, nil
	}, "")
	var names []string
	for _, pid := range left {
		names = append(names, describe(pid))
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return names
}

// marked lists the live processes (not zombies) whose environment holds
// mark, other than this one.
func marked(mark []byte) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, mark) {
			continue
		}
		if stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); bytes.Contains(stat, []byte(") Z ")) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// describe is a process's pid and command line.
func describe(pid int) string {
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return fmt.Sprintf("%d %s", pid, strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")))
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
