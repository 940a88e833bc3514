package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"simpler/internal/mpitest"
)

// printNodesScript: two remote nodes from its # simpler-daemons: header,
// each printing lines of 300 bytes at once, from its node orchestration
// and from a kernel; then a kernel of node 0 prints past the session's
// bound of forwarded bytes (1 MiB).
const printNodesScript = `# simpler-daemons: 2
PAD = "x" * 300

def chatter(chip, args):
    for i in range(args.scalar(1)):
        print("kernel of node", args.scalar(0), "line", i, PAD)

def flood(chip, args):
    for i in range(1000):
        print("flood", i, PAD * 4)

def flood_node(o, args, cfg):
    o.submit_next_level(flood, TaskArgs(), worker = 0)

def on_node(o, args, cfg):
    print("orchestration of node", args.scalar(0))
    o.submit_next_level(chatter, TaskArgs(scalars = [args.scalar(0), args.scalar(1)]), worker = 0)

def main(ctx):
    w = Worker(level = 4, platform = ctx.platform)
    a = w.add_remote_worker(endpoint = ctx.argv[0], device_ids = [0])
    b = w.add_remote_worker(endpoint = ctx.argv[1], device_ids = [0])
    w.register(chatter)
    w.register(flood)
    w.register(on_node)
    w.register(flood_node)
    w.init()
    def orch(o, args, cfg):
        for n in [a, b]:
            o.submit_next_level(on_node, TaskArgs(scalars = [n, 400]), worker = n)
    w.run(orch)
    print("both ran")
    w.run(lambda o, args, cfg: o.submit_next_level(on_node, TaskArgs(scalars = [a, 0]), worker = a))
    w.run(lambda o, args, cfg: o.submit_next_level(flood_node, TaskArgs(), worker = a))
    print("flooded")
    w.close()
`

// What remote nodes print reaches simpler run's stdout: every line whole
// and tagged with its node, though both print at once, in the order each
// printed, before the run that printed it returns, whether the level-4
// worker runs its nodes as threads or processes; a session forwards at
// most its bound and then says so once; --no-tag-output drops the tags.
func TestRemotePrintReachesTheParent(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.star": printNodesScript})
	exe, _ := os.Executable()
	for _, c := range []struct {
		mode string
		tags bool
	}{{"thread", true}, {"process", true}, {"thread", false}} {
		tags := c.tags
		args := []string{"run", "--mode", c.mode, "p.star"}
		if !tags {
			args = []string{"run", "--mode", c.mode, "--no-tag-output", "p.star"}
		}
		run := exec.Command(exe, args...)
		env := cliEnv("NO_COLOR=1")
		run.Dir, run.Env = dir, env
		var stdout, stderr strings.Builder
		run.Stdout, run.Stderr = &stdout, &stderr
		if err := run.Run(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stderr.String())
		}
		checkNoShm(t, env)
		checkRemotePrints(t, tags, stdout.String(), stderr.String())
	}
}

func checkRemotePrints(t *testing.T, tags bool, stdout, stderr string) {
	t.Helper()
	tag := func(n string) string {
		if tags {
			return `\[node ` + n + `\] `
		}
		return ""
	}
	pad := strings.Repeat("x", 300)
	chatter := regexp.MustCompile(`^` + tag(`([01])`) + `kernel of node ([01]) line (\d+) ` + pad + `$`)
	orchLine := regexp.MustCompile(`^` + tag(`([01])`) + `orchestration of node ([01])$`)
	flood := regexp.MustCompile(`^` + tag(`0`) + `flood (\d+) ` + strings.Repeat(pad, 4) + `$`)
	next := map[string]int{} // the next line each node's kernel prints
	floods, phase := 0, 0
	for _, line := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		if m := chatter.FindStringSubmatch(line); m != nil {
			node, i := m[len(m)-2], m[len(m)-1]
			if (tags && m[1] != node) || phase != 0 || i != fmt.Sprint(next[node]) {
				t.Fatalf("line out of place (phase %d, node %s expected line %d): %.80q", phase, node, next[node], line)
			}
			next[node]++
			continue
		}
		switch {
		case orchLine.MatchString(line):
		case flood.MatchString(line):
			floods++
		case line == "both ran" && phase == 0:
			phase = 1
		case line == "flooded" && phase == 1:
			phase = 2
		default:
			t.Fatalf("a line neither whole nor expected (tags %v): %.120q", tags, line)
		}
	}
	if next["0"] != 400 || next["1"] != 400 || phase != 2 {
		t.Errorf("kernel lines of nodes 0 and 1: %d, %d of 400; phase %d", next["0"], next["1"], phase)
	}
	// 1 MiB less the first run's lines, in lines of 1209 bytes and the tag.
	if floods < 100 || floods >= 1000 {
		t.Errorf("%d flood lines passed the session's 1 MiB bound, want some but not all 1000", floods)
	}
	note := "output beyond its bound of 1048576 bytes: the rest is on the daemon's output only"
	if strings.Count(stderr, note) != 1 || (tags && !strings.Contains(stderr, "[node 0] "+note)) {
		t.Errorf("stderr should say once that node 0 passed its bound:\n%.2000s", stderr)
	}
}

// A rank of a worker group started by mpirun prints too: its lines reach
// the level-4 process tagged with its rank.
func TestRankPrintReachesTheParent(t *testing.T) {
	if mpitest.Find(t) == "" {
		return // said loudly by Find; fails under CI
	}
	const script = `
def hello(chip, args):
    print("hello from rank", args.scalar(0))

def on_rank(o, args, cfg):
    o.submit_next_level(hello, args, worker = 0)

def main(ctx):
    w = Worker(level = 4, platform = ctx.platform)
    ranks = w.add_worker_group(ranks = 2, launcher = "mpirun", device_ids = [0])
    w.register(hello)
    w.register(on_rank)
    w.init()
    for r, id in enumerate(ranks):
        w.run(lambda o, args, cfg: o.submit_next_level(on_rank, TaskArgs(scalars = [r]), worker = id))
    w.close()
`
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"g.star": script})
	exe, _ := os.Executable()
	run := exec.Command(exe, "run", "g.star")
	env := cliEnv("NO_COLOR=1")
	run.Dir, run.Env = dir, env
	var stderr strings.Builder
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, stderr.String())
	}
	if want := "[rank 0] hello from rank 0\n[rank 1] hello from rank 1\n"; string(out) != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	checkNoShm(t, env)
}
