package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"simpler/hal/shm"
)

// retainedDeadPeer allocates a global domain over a chip of a local node
// (its chips in mode ctx.argv[1], as the level-4 worker's) and a chip of
// a remote one, retained after its run (after a first domain over the
// same members if ctx.argv[3] is "warm", so that it comes up by REATTACH
// over pooled windows), and says so. Then it runs work on the remote node
// until a run fails (the test kills the session meanwhile): a no-op, or
// with ctx.argv[2] "use" a run that finds the domain on both nodes. With
// "both" it then releases the domain and closes the worker, printing what
// each said; with the others it ends there, leaving both to the end of
// the script.
const retainedDeadPeer = `
def noop(o, args, cfg):
    pass

def use(o, args, cfg):
    o.get_global_domain(args.scalar(0))

def use_both(o, args, cfg):
    for node in range(2):
        o.submit_next_level(use, TaskArgs(scalars = [args.scalar(0)]), worker = node)

def warm_run(o, args, cfg):
    o.allocate_global_domain(name = "warm", members = [(0, 0), (1, 0)], window_size = 4096)

def first_run(o, args, cfg):
    return o.allocate_global_domain(name = "kept", members = [(0, 0), (1, 0)], window_size = 4096, retain_after_run = True)

def main(ctx):
    w = Worker(level = 4, platform = ctx.platform, mode = ctx.mode)
    w.add_worker(Worker(level = 3, platform = ctx.platform, device_ids = [0], mode = ctx.argv[1]))
    w.add_remote_worker(endpoint = ctx.argv[0], platform = ctx.platform, device_ids = [0])
    w.register(noop)
    w.register(use)
    w.init()
    if ctx.argv[3] == "warm":
        w.run(warm_run)
    d = w.run(first_run)
    print("retained", d.retain_after_run)
    err = ""
    for i in range(100000):
        if ctx.argv[2] == "use":
            err = catch(w.run, use_both, TaskArgs(scalars = [d.domain_id]))
        else:
            err = catch(w.run, lambda o, a, c: o.submit_next_level(noop, TaskArgs(), worker = 1))
        if err:
            print(err)
            break
    print("remote node failed:", err != "")
    if ctx.argv[2] == "both":
        print("release:", catch(d.release))
        print("close:", catch(w.close))
    print("end")
`

// Issue 23, point 10: a retained global domain over a local node's chip
// and a remote node's (a real daemon), whose remote session is killed
// (kill -9) while the domain lives: the local node's window, in /dev/shm
// while the domain lives, is gone with the prefix's lock when the script
// ends, whether the script releases and closes or leaves both to the
// runtime, for a local node of chip threads or chip processes and for a
// domain made fresh or by REATTACH over pooled windows.
func TestRetainedDomainDeadRemotePeer(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.star": retainedDeadPeer})
	exe, _ := os.Executable()
	for _, mode := range []string{"thread", "process"} {
		for _, warm := range []string{"cold", "warm"} {
			for _, ending := range []string{"both", "use", "none"} {
				t.Run(mode+"/"+warm+"/"+ending, func(t *testing.T) {
					d, addr, _ := startRemoteDaemonLog(t)
					run := exec.Command(exe, "run", "--mode", mode, filepath.Join(dir, "main.star"), addr, mode, ending, warm)
					run.Env = cliEnv()
					run.Stderr = os.Stderr
					stdout, err := run.StdoutPipe()
					if err != nil {
						t.Fatal(err)
					}
					if err := run.Start(); err != nil {
						t.Fatal(err)
					}
					defer run.Process.Kill() // after a failure below; a no-op once it has exited
					sc := bufio.NewScanner(stdout)
					if !sc.Scan() || sc.Text() != "retained True" {
						t.Fatalf("the script's first line: %q", sc.Text())
					}
					prefix := prefixOf(run.Env)
					left, _ := shm.Leftovers(prefix)
					if !slices.ContainsFunc(left, isGlobalWindow) {
						t.Fatalf("the retained domain has no window of the local node in /dev/shm while it lives: %v", left)
					}
					sessions := childPids(d.Process.Pid)
					if len(sessions) != 1 {
						t.Fatalf("the daemon has %d sessions, want 1", len(sessions))
					}
					if err := syscall.Kill(sessions[0], syscall.SIGKILL); err != nil {
						t.Fatal(err)
					}
					var out []string
					for sc.Scan() {
						out = append(out, sc.Text())
					}
					start := time.Now()
					err = run.Wait()
					t.Logf("%s mode: %s (exited %v after its output ended)", mode, strings.Join(out, " | "), time.Since(start))
					if !strings.Contains(strings.Join(out, "\n"), "remote node failed: True") {
						t.Fatalf("the script: %v\n%s", err, strings.Join(out, "\n"))
					}
					checkNoShm(t, run.Env)
				})
			}
		}
	}
}

// isGlobalWindow reports whether an object's name is a global domain's
// window: pooled ("gwin-", a node of chip threads) or per domain ("gdom-",
// a node of chip processes).
func isGlobalWindow(name string) bool {
	return strings.Contains(name, "-gwin-") || strings.Contains(name, "-gdom-")
}
