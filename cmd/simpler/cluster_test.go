package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"go.starlark.net/syntax"

	"simpler/internal/mpitest"
	"simpler/starlib"
)

// docs/cluster.md and deploy/ are checked as far as one host can check
// them: every simpler command they show takes the flags they give it,
// every file they name exists, every Starlark snippet parses and calls
// Worker, add_worker_group and add_remote_worker with keywords those
// take; and the deploy files run here (TestDeployFilesRun).

const repoRoot = "../.."

// clusterFiles are docs/cluster.md and every file under deploy/.
func clusterFiles(t *testing.T) []string {
	files := []string{filepath.Join(repoRoot, "docs", "cluster.md")}
	err := filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestClusterDocCommands(t *testing.T) {
	n := 0
	for _, file := range clusterFiles(t) {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range simplerCommands(file, string(src)) {
			n++
			if bad := unknownFlags(cmd); len(bad) > 0 {
				t.Errorf("%s: `simpler %s`: %s has no flag %s", file, strings.Join(cmd, " "), cmd[0], strings.Join(bad, ", "))
			}
		}
	}
	if n < 10 {
		t.Errorf("found %d simpler commands in docs/cluster.md and deploy/; the parser misses them", n)
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "cluster.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("(?:^|[^/\\w])((?:deploy|scripts|docs)/[A-Za-z0-9_./-]*[A-Za-z0-9_])").FindAllStringSubmatch(string(doc), -1) {
		if p := m[1]; !fileExistsAt(filepath.Join(repoRoot, p)) {
			t.Errorf("docs/cluster.md names %s, which does not exist", p)
		}
	}
	snippets := 0
	for _, b := range parseDoc(string(doc)) {
		if b.info == "python" {
			snippets++
			checkKeywords(t, fmt.Sprintf("docs/cluster.md:%d", b.line), strings.Join(b.body, "\n"))
		}
	}
	if snippets == 0 {
		t.Error("docs/cluster.md has no python snippets")
	}
}

func fileExistsAt(p string) bool { _, err := os.Stat(p); return err == nil }

// simplerCommands finds every `simpler CMD ARGS...` in a file: in a line
// of a shell or Starlark file (a trailing backslash continues it), in a
// YAML list (one word per `- item`), and in Markdown in a code block's
// line or a code span. Each is CMD and the words after it.
func simplerCommands(file, src string) [][]string {
	var units []string
	switch filepath.Ext(file) {
	case ".md":
		units = markdownCode(src)
	case ".yaml", ".yml":
		units = yamlUnits(src)
	default:
		units = strings.Split(strings.ReplaceAll(src, "\\\n", " "), "\n")
	}
	var cmds [][]string
	for _, u := range units {
		words := strings.FieldsFunc(u, func(r rune) bool { return unicode.IsSpace(r) || strings.ContainsRune("`\"'[](),", r) })
		for i := 0; i+1 < len(words); i++ {
			if words[i] != "simpler" && !strings.HasSuffix(words[i], "/simpler") {
				continue
			}
			if _, ok := lookupCommand(words[i+1]); !ok {
				continue
			}
			end := i + 1
			for end < len(words) && !slices.Contains([]string{"|", ";", "&&", "||", "#", ">", "<", "&"}, words[end]) {
				end++
			}
			cmds = append(cmds, words[i+1:end])
		}
	}
	return cmds
}

// markdownCode is the lines of a Markdown file's code blocks (a YAML
// block's as yamlUnits makes them) and its code spans (a span may cross a
// line break within its paragraph).
func markdownCode(src string) []string {
	var units, para, block []string
	flush := func() {
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(strings.Join(para, " "), -1) {
			units = append(units, m[1])
		}
		para = nil
	}
	info := "" // the open block's info string, "" outside one
	for _, l := range strings.Split(src, "\n") {
		fence, isFence := strings.CutPrefix(strings.TrimSpace(l), "```")
		switch {
		case isFence && info == "":
			flush()
			info = fence + " "
		case isFence:
			if strings.HasPrefix(info, "yaml") {
				block = yamlUnits(strings.Join(block, "\n"))
			}
			units, block, info = append(units, block...), nil, ""
		case info != "":
			block = append(block, l)
		case strings.TrimSpace(l) == "":
			flush()
		default:
			para = append(para, l)
		}
	}
	flush()
	return units
}

var yamlItem = regexp.MustCompile(`^\s*- (.*)$`)

// yamlUnits is a YAML file's lines, each run of `- item` lines joined
// into one.
func yamlUnits(src string) []string {
	var units, run []string
	for _, l := range strings.Split(src, "\n") {
		if m := yamlItem.FindStringSubmatch(l); m != nil {
			run = append(run, m[1])
			continue
		}
		if run != nil {
			units, run = append(units, strings.Join(run, " ")), nil
		}
		units = append(units, l)
	}
	return append(units, strings.Join(run, " "))
}

// unknownFlags are the --flags of cmd (CMD ARGS...) that CMD does not
// take; --max-* stands for every flag it names.
func unknownFlags(cmd []string) []string {
	c, _ := lookupCommand(cmd[0])
	fs := flagSet(c.name)
	if c.flags != nil {
		c.flags(fs)
	}
	var bad []string
	for _, w := range cmd[1:] {
		name, ok := strings.CutPrefix(w, "--")
		if !ok || name == "" {
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		if prefix, wild := strings.CutSuffix(name, "*"); wild {
			found := false
			fs.VisitAll(func(f *flag.Flag) { found = found || strings.HasPrefix(f.Name, prefix) })
			if !found {
				bad = append(bad, w)
			}
		} else if fs.Lookup(name) == nil {
			bad = append(bad, w)
		}
	}
	return bad
}

// checkKeywords parses a Starlark snippet and checks that its calls of
// Worker, add_worker_group and add_remote_worker use keywords they take
// (their signatures in `simpler doc`).
func checkKeywords(t *testing.T, where, src string) {
	t.Helper()
	f, err := (&syntax.FileOptions{Set: true, While: true, TopLevelControl: true, GlobalReassign: true, Recursion: true}).Parse(where, src, 0)
	if err != nil {
		t.Errorf("%s: does not parse: %v", where, err)
		return
	}
	params := map[string][]string{}
	for name, doc := range map[string]string{"Worker": "Worker", "add_worker_group": "Worker.add_worker_group", "add_remote_worker": "Worker.add_remote_worker"} {
		docs := starlib.LookupDoc(doc)
		if len(docs) == 0 {
			t.Fatalf("simpler doc has no %s", doc)
		}
		sig := docs[0].Signature
		for _, m := range regexp.MustCompile(`(\w+)=`).FindAllStringSubmatch(sig[strings.IndexByte(sig, '('):], -1) {
			params[name] = append(params[name], m[1])
		}
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		call, ok := n.(*syntax.CallExpr)
		if !ok {
			return true
		}
		name := ""
		switch fn := call.Fn.(type) {
		case *syntax.Ident:
			name = fn.Name
		case *syntax.DotExpr:
			name = fn.Name.Name
		}
		for _, arg := range call.Args {
			if b, ok := arg.(*syntax.BinaryExpr); ok && b.Op == syntax.EQ && params[name] != nil {
				if k := b.X.(*syntax.Ident).Name; !slices.Contains(params[name], k) {
					t.Errorf("%s: %s takes no keyword %s (it takes %s)", where, name, k, strings.Join(params[name], ", "))
				}
			}
		}
		return true
	})
}

// The deploy files run on this host: the mpirun script with real mpirun
// on 127.0.0.1 (mpitest's rule when it is missing); the Slurm batch
// script as sbatch would run it, with a stand-in srun that starts its
// tasks here with $SLURM_PROCID; the Kubernetes manifest's level-4 script
// and rank command, the ranks started by the test as the Indexed Job
// would, each with its $JOB_COMPLETION_INDEX.
func TestDeployFilesRun(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(t.TempDir(), "group.token")
	if err := os.WriteFile(tok, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("mpirun", func(t *testing.T) {
		if mpitest.Find(t) == "" {
			return
		}
		out, errs, err := runBounded(exec.Command(exe, "run", filepath.Join(repoRoot, "deploy/mpirun/cluster.star"), "127.0.0.1:0", tok, "127.0.0.1:2"), nil)
		if err != nil || out != "2 ranks on 127.0.0.1:2: every chip wrote its part\n" {
			t.Errorf("deploy/mpirun/cluster.star: %v\nstdout %q\nstderr:\n%s", err, out, errs)
		}
	})
	t.Run("slurm", func(t *testing.T) { checkSlurmDeploy(t, exe) })
	t.Run("k8s", func(t *testing.T) { checkK8sDeploy(t, exe, tok) })
}

// fakeSrun stands in for Slurm's srun on one host: it logs its arguments,
// then runs --ntasks copies of the program, each with $SLURM_PROCID.
const fakeSrun = `#!/bin/sh
echo "srun $*" >> "$FAKE_SRUN_LOG"
n=1
while [ $# -gt 0 ]; do
	case "$1" in
	--ntasks) n=$2; shift 2 ;;
	--nodelist) shift 2 ;;
	--*=*) shift ;;
	*) break ;;
	esac
done
i=0
while [ $i -lt $n ]; do SLURM_PROCID=$i "$@" & i=$((i + 1)); done
rc=0
for p in $(jobs -p); do wait $p || rc=1; done
exit $rc
`

// checkSlurmDeploy runs deploy/slurm/simpler-group.sbatch as sbatch would
// on a two-node allocation, simpler and srun on its PATH being this
// binary and fakeSrun, the group listening on loopback.
func checkSlurmDeploy(t *testing.T, exe string) {
	bin, home := t.TempDir(), t.TempDir()
	log := filepath.Join(t.TempDir(), "srun.log")
	if err := os.Symlink(exe, filepath.Join(bin, "simpler")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "srun"), []byte(fakeSrun), 0o755); err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs(repoRoot)
	cmd := exec.Command("bash", filepath.Join(root, "deploy/slurm/simpler-group.sbatch"))
	env := []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "HOME=" + home, "FAKE_SRUN_LOG=" + log, "SLURM_SUBMIT_DIR=" + root,
		"SLURM_JOB_NUM_NODES=2", "SLURM_CPUS_ON_NODE=1", "SIMPLER_GROUP_LISTEN=127.0.0.1:0"}
	out, errs, err := runBounded(cmd, env)
	want := "global domain over ranks [0]: members (node, chip) [(0, 0), (0, 1)]\n" +
		"global domain over ranks [1]: members (node, chip) [(1, 0), (1, 1)]\n" +
		"2 ranks under srun: every chip added its ring neighbour's window\n"
	if err != nil || out != want {
		t.Errorf("the batch script: %v\nstdout %q\nstderr:\n%s", err, out, errs)
	}
	if fi, err := os.Stat(filepath.Join(home, ".simpler", "group.token")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the batch script's token file: %v %v", fi, err)
	}
	b, _ := os.ReadFile(log)
	if want := "srun --ntasks 2 --ntasks-per-node=1 --cpus-per-task=1 " + exe + " remote-l3-worker --connect 127.0.0.1:"; !strings.HasPrefix(string(b), want) {
		t.Errorf("srun was run as\n%s\nwant\n%s...", b, want)
	}
}

// checkK8sDeploy runs deploy/k8s/simpler-group.yaml's level-4 command
// and script, for two ranks listening on loopback, and its rank command
// twice, dialling that address as the Indexed Job's pods dial the
// Service.
func checkK8sDeploy(t *testing.T, exe, tok string) {
	manifest, err := os.ReadFile(filepath.Join(repoRoot, "deploy/k8s/simpler-group.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	script, commands := manifestParts(string(manifest))
	if len(commands) != 2 || len(commands[0]) != 6 || commands[0][0] != "simpler" || commands[1][0] != "simpler" {
		t.Fatalf("the manifest's commands: %q", commands)
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.star": script})
	swap := map[string]string{"/scripts/main.star": filepath.Join(dir, "main.star"), "0.0.0.0:7000": "127.0.0.1:0", "/etc/simpler/token": tok, "4": "2"}
	l4 := exec.Command(exe, replaceArgs(commands[0][1:], swap)...)
	l4.Env = cliEnv("NO_COLOR=1")
	var stdout bytes.Buffer
	l4.Stdout = &stdout
	errPipe, err := l4.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := l4.Start(); err != nil {
		t.Fatal(err)
	}
	defer l4.Process.Kill() // a no-op once it has exited
	lines := bufio.NewScanner(errPipe)
	addr := ""
	if lines.Scan() {
		if m := regexp.MustCompile(`listens on (\S+) for its 2 ranks`).FindStringSubmatch(lines.Text()); m != nil {
			addr = m[1]
		}
	}
	go func() {
		for lines.Scan() {
			t.Logf("level 4: %s", lines.Text())
		}
	}()
	if addr == "" {
		t.Fatal("the level-4 pod's script did not say where it listens")
	}
	rankArgs := replaceArgs(commands[1][1:], map[string]string{"simpler-l4:7000": addr, "/etc/simpler/token": tok})
	var ranks []*exec.Cmd
	for i := range 2 {
		c := exec.Command(exe, rankArgs...)
		c.Env = cliEnv(fmt.Sprintf("JOB_COMPLETION_INDEX=%d", i), "OMPI_COMM_WORLD_RANK=", "PMIX_RANK=", "PMI_RANK=", "SLURM_PROCID=")
		c.Stdout, c.Stderr = os.Stderr, os.Stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		ranks = append(ranks, c)
	}
	for _, c := range append([]*exec.Cmd{l4}, ranks...) {
		if err := waitBounded(c, time.Minute); err != nil {
			t.Errorf("%s: %v", strings.Join(c.Args[1:3], " "), err)
		}
	}
	if stdout.String() != "2 ranks dialled in: every chip wrote its part\n" {
		t.Errorf("the level-4 pod printed %q", stdout.String())
	}
}

// manifestParts is the ConfigMap's main.star and every container's
// command list, in the manifest's order.
func manifestParts(manifest string) (script string, commands [][]string) {
	lines := strings.Split(manifest, "\n")
	for i := 0; i < len(lines); i++ {
		switch strings.TrimSpace(lines[i]) {
		case "main.star: |":
			var body []string
			for i++; i < len(lines) && (lines[i] == "" || strings.HasPrefix(lines[i], "    ")); i++ {
				body = append(body, strings.TrimPrefix(lines[i], "    "))
			}
			script = strings.Join(body, "\n")
			i--
		case "command:":
			var cmd []string
			for i++; i < len(lines) && yamlItem.MatchString(lines[i]); i++ {
				cmd = append(cmd, strings.Trim(yamlItem.FindStringSubmatch(lines[i])[1], `"`))
			}
			commands = append(commands, cmd)
			i--
		}
	}
	return script, commands
}

// replaceArgs is args with each that is a key of with replaced by its
// value.
func replaceArgs(args []string, with map[string]string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if s, ok := with[a]; ok {
			out[i] = s
		}
	}
	return out
}

// runBounded runs cmd as the CLI (env added) in a process group of its
// own, killed if it runs past a minute, and returns its output.
func runBounded(cmd *exec.Cmd, env []string) (stdout, stderr string, err error) {
	cmd.Env = append(cliEnv("NO_COLOR=1"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", "", err
	}
	err = waitBounded(cmd, time.Minute)
	return out.String(), errb.String(), err
}

// waitBounded waits for cmd, and kills it (its process group, if it has
// one of its own) when it runs past bound.
func waitBounded(cmd *exec.Cmd, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		if cmd.SysProcAttr != nil && cmd.SysProcAttr.Setpgid {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("still running after %v; killed", bound)
	}
}
