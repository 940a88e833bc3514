package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A rank's command line: --connect takes --token-file and a rank (from
// --rank or the launcher's environment); the rank flags need --connect.
func TestRankFlags(t *testing.T) {
	for _, v := range []string{"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "JOB_COMPLETION_INDEX"} {
		t.Setenv(v, "")
	}
	tok := filepath.Join(t.TempDir(), "t")
	os.WriteFile(tok, []byte("0123456789abcdef0123\n"), 0o600)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--connect", "127.0.0.1:1"}, 2, "--connect needs --token-file"},
		{[]string{"--connect", "nowhere", "--token-file", tok}, 2, `--connect "nowhere" is not host:port`},
		{[]string{"--connect", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--token-file", tok}, 2, "--listen and --connect"},
		{[]string{"--rank", "1"}, 2, "--rank is for a rank, with --connect"},
		{[]string{"--devices", "0"}, 2, "--devices is for a rank, with --connect"},
		{[]string{"--connect", "127.0.0.1:1", "--token-file", tok, "--rank", "x"}, 2, `--rank "x" is not a rank`},
		{[]string{"--connect", "127.0.0.1:1", "--token-file", tok, "--platform", "tpu", "--rank", "0"}, 1, `unknown platform "tpu"`},
		{[]string{"--connect", "127.0.0.1:1", "--token-file", tok}, 1,
			"no rank: give --rank N, or run under a launcher that sets one of $OMPI_COMM_WORLD_RANK, $PMIX_RANK, $PMI_RANK, $SLURM_PROCID, $JOB_COMPLETION_INDEX (none is set)"},
		{[]string{"--connect", "127.0.0.1:1", "--token-file", tok, "--rank", "0", "--connect-timeout", "100ms"}, 1, "cannot reach the level-4 worker at 127.0.0.1:1 within --connect-timeout"},
	}
	for _, c := range cases {
		code, out, errs := runCLI(t, append([]string{"remote-l3-worker"}, c.args...)...)
		if code != c.code || !strings.Contains(errs, c.want) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d saying %q", c.args, code, out, errs, c.code, c.want)
		}
	}
}

const groupNoneScript = `
def add1(chip, args):
    t = args.tensor(0)
    t.write(t.read() + 1)

def on_rank(o, args, cfg):
    o.submit_next_level(add1, args, worker = 0)

def main(ctx):
    w = Worker(level = 4, platform = ctx.platform)
    ids = w.add_worker_group(ranks = 2, launcher = "none", device_ids = [0])
    w.register(add1)
    w.register(on_rank)
    w.init()
    for id in ids:
        h = w.remote_malloc(worker = id, nbytes = 4)
        w.run(lambda o, a, c: o.submit_next_level(on_rank, TaskArgs(tensors = [(RemoteTensorRef(h, shape = [1], dtype = INT32), INOUT)]), worker = id))
        out = host_tensor(shape = [1], dtype = INT32)
        w.remote_copy_from(h, out, 4)
        print("rank", ids.index(id), out.read().tolist())
    w.close()
`

// A launcher "none" group says where it listens and what to run on
// stderr; ranks started as the CLI says (one with --rank, one from
// $PMI_RANK) join it, run its tasks and exit when it closes.
func TestGroupWithCLIRanks(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"g.star": groupNoneScript})
	exe, _ := os.Executable()
	run := exec.Command(exe, "run", "g.star")
	run.Dir, run.Env = dir, cliEnv("NO_COLOR=1")
	var stdout bytes.Buffer
	run.Stdout = &stdout
	errPipe, err := run.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(errPipe)
	var said []string
	for len(said) < 2 && lines.Scan() {
		said = append(said, lines.Text())
	}
	go func() {
		for lines.Scan() {
			t.Logf("simpler run: %s", lines.Text())
		}
	}()
	m := regexp.MustCompile(`^  simpler remote-l3-worker --connect (\S+) --token-file (\S+) --platform a2a3sim --devices 0 --rank N$`).FindStringSubmatch(strings.Join(said[1:], ""))
	if len(said) < 2 || !strings.HasPrefix(said[0], "simpler: worker group 0 listens on ") || m == nil {
		run.Process.Kill()
		run.Wait()
		t.Fatalf("the group did not say what to run: %q", said)
	}
	var ranks []*exec.Cmd
	var output []*bytes.Buffer
	for _, how := range [][]string{{"--rank", "0"}, nil} {
		c := exec.Command(exe, append([]string{"remote-l3-worker", "--connect", m[1], "--token-file", m[2]}, how...)...)
		c.Env = cliEnv("PMI_RANK=1", "OMPI_COMM_WORLD_RANK=", "PMIX_RANK=")
		out := &bytes.Buffer{}
		c.Stdout, c.Stderr = out, out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		ranks, output = append(ranks, c), append(output, out)
	}
	defer func() {
		if t.Failed() {
			for r, out := range output {
				t.Logf("rank %d said:\n%s", r, out)
			}
		}
	}()
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()
	select {
	case err := <-done:
		if err != nil || stdout.String() != "rank 0 [1]\nrank 1 [1]\n" {
			t.Errorf("simpler run: %v, stdout %q", err, stdout.String())
		}
	case <-time.After(30 * time.Second):
		run.Process.Kill()
		<-done
		t.Fatal("simpler run did not finish")
	}
	for r, c := range ranks {
		waited := make(chan error, 1)
		go func() { waited <- c.Wait() }()
		select {
		case err := <-waited:
			if err != nil {
				t.Errorf("rank %d exited with %v", r, err)
			}
		case <-time.After(10 * time.Second):
			c.Process.Kill()
			<-waited
			t.Errorf("rank %d still runs after its worker closed", r)
		}
	}
}
