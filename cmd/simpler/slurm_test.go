package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"simpler/internal/slurmtest"
)

// deploy/slurm/ under a real Slurm of two nodes on this host
// (internal/slurmtest: Debian's slurmctld, slurmd and munged, started
// and stopped by the test). Both ways in: simpler run of cluster.star,
// whose add_worker_group(launcher = "srun") runs the real srun, which
// asks slurmctld for an allocation of two nodes and has each slurmd start
// a rank, with one global domain across the two ranks' four chips, the
// level-4 worker in thread and in process mode; and
// simpler-group.sbatch through sbatch, the batch step starting the group
// with srun inside its allocation, a domain per rank as on a cluster.
// Both are Slurm jobs on two nodes that completed. simpler is this binary
// run as the CLI (TestMain), at its path on both nodes.
//
// Without Slurm outside CI the test says so in one loud line and checks
// nothing; under CI it fails (.ci/run installs Slurm).
// TestDeployFilesRun's fake srun still runs everywhere.
func TestSlurmDeploy(t *testing.T) {
	c := slurmtest.Start(t, 2)
	if c == nil {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs(repoRoot)
	tok := filepath.Join(t.TempDir(), "group.token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, mode := range []string{"thread", "process"} {
		t.Run("srun/"+mode, func(t *testing.T) {
			cmd := exec.Command(exe, "run", "--mode", mode, filepath.Join(root, "deploy/slurm/cluster.star"), "2", tok, "1", "127.0.0.1:0", "2")
			job := "srun-" + mode // srun's --job-name, from its environment
			out, errs, err := runBounded(cmd, append(c.Env(), "SLURM_JOB_NAME="+job))
			want := "global domain over ranks [0, 1]: members (node, chip) [(0, 0), (0, 1), (1, 0), (1, 1)]\n" +
				"2 ranks under srun: every chip added its ring neighbour's window\n"
			if err != nil || out != want {
				t.Errorf("simpler run --mode %s deploy/slurm/cluster.star under Slurm: %v\nstdout %q\nwant   %q\nstderr:\n%s", mode, err, out, want, errs)
			}
			checkSlurmJob(t, c, job)
		})
	}

	t.Run("sbatch", func(t *testing.T) {
		bin, home, logs := t.TempDir(), t.TempDir(), t.TempDir()
		if err := os.Symlink(exe, filepath.Join(bin, "simpler")); err != nil {
			t.Fatal(err)
		}
		stdout, stderr := filepath.Join(logs, "job.out"), filepath.Join(logs, "job.err")
		cmd := exec.Command(c.Path("sbatch"), "--parsable", "--nodes=2", "--job-name=batch-group", "--output="+stdout, "--error="+stderr,
			filepath.Join(root, "deploy/slurm/simpler-group.sbatch"))
		cmd.Dir = root // $SLURM_SUBMIT_DIR, where the script finds cluster.star
		env := append(c.Env(), "PATH="+bin+":"+os.Getenv("PATH"), "HOME="+home, "SIMPLER_GROUP_LISTEN=127.0.0.1:0")
		id, errs, err := runBounded(cmd, env)
		if err != nil {
			t.Fatalf("sbatch deploy/slurm/simpler-group.sbatch: %v\n%s%s", err, id, errs)
		}
		// Not sbatch --wait: it sleeps 2, 4, 8 s between looks.
		state, err := c.WaitJob(strings.TrimSpace(id), time.Minute)
		out, _ := os.ReadFile(stdout)
		jobErr, _ := os.ReadFile(stderr)
		want := "global domain over ranks [0]: members (node, chip) [(0, 0), (0, 1)]\n" +
			"global domain over ranks [1]: members (node, chip) [(1, 0), (1, 1)]\n" +
			"2 ranks under srun: every chip added its ring neighbour's window\n"
		if err != nil || state != "COMPLETED" || string(out) != want {
			t.Errorf("sbatch deploy/slurm/simpler-group.sbatch: job %s %s %v\nthe job's stdout %q\nwant             %q\nits stderr:\n%s", strings.TrimSpace(id), state, err, out, want, jobErr)
		}
		if fi, err := os.Stat(filepath.Join(home, ".simpler", "group.token")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("the batch script's token file: %v %v", fi, err)
		}
		checkSlurmJob(t, c, "batch-group")
	})
}

// checkSlurmJob checks that Slurm ran one job named name, on both nodes,
// and that it completed (a job's end is recorded a moment after its
// processes exit).
func checkSlurmJob(t *testing.T, c *slurmtest.Cluster, name string) {
	t.Helper()
	id, err := c.Run("squeue", "--noheader", "--states=all", "--name="+name, "--format=%i")
	if err != nil {
		t.Fatal(err)
	}
	if id = strings.TrimSpace(id); id == "" || strings.Contains(id, "\n") {
		t.Fatalf("Slurm has %q for jobs named %s, want one", id, name)
	}
	state, err := c.WaitJob(id, time.Minute)
	nodes, _ := c.Run("squeue", "--noheader", "--states=all", "--jobs="+id, "--format=%D %N")
	if err != nil || state != "COMPLETED" || strings.TrimSpace(nodes) != "2 n[1-2]" {
		t.Errorf("Slurm's record of job %s (%s): %s on %q (%v), want COMPLETED on 2 nodes, n[1-2]", id, name, state, strings.TrimSpace(nodes), err)
	}
}
