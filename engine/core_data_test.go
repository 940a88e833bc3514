package engine

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Data-driven core tests, in the style of etcd-io/raft's testdata: each
// file under testdata/core is a script of steps on one core, each step a
// command, a line "----", and what the step must give, then a blank line.
// The core is stepped directly (coreT): no Worker, no goroutines.
//
// Commands:
//
//	run                     begin the next run (r1, r2, ...), being built
//	task NAME on W [after A B ...]
//	                        submit a single task of the last run to NEXT_LEVEL
//	                        worker W, after tasks A, B, ... (its producers)
//	finish NAME [fail MSG]  the task's member comes back, ok or failed
//	expire NAME             the task passes its deadline
//	built RUN               the run's orchestration function returned
//	done RUN                the run passed its fence and cleaned up
//	cancel RUN              cancel the run
//
// Each step prints what the core asked for: "assign" (task names), "stop"
// (task names), "fenced RUN", and the state of every task it changed
// (NAME: ready/held/pending N/done/failed MSG). `go test -run TestCoreData -rewrite`
// rewrites the expectations from what the core does.

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/core expectations")

type coreScript struct {
	ct    *coreT
	runs  []*Run
	tasks map[string]*Task
	names map[*Task]string
}

func TestCoreData(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "core", "*.txt"))
	if len(files) == 0 {
		t.Fatal("no testdata/core/*.txt")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runCoreScript(t, file) })
	}
}

func runCoreScript(t *testing.T, file string) {
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := &coreScript{ct: newCoreT(t, 4), tasks: map[string]*Task{}, names: map[*Task]string{}}
	var out strings.Builder
	for _, block := range strings.Split(strings.TrimSpace(string(src)), "\n\n") {
		cmd, want, ok := strings.Cut(block, "\n----\n")
		if !ok {
			cmd, want, _ = strings.Cut(block, "\n----")
		}
		if strings.HasPrefix(cmd, "#") { // a comment block, kept as it is
			out.WriteString(block + "\n\n")
			continue
		}
		got, err := s.step(strings.Fields(cmd))
		if err != nil {
			t.Fatalf("%s: %q: %v", file, cmd, err)
		}
		if !*rewrite && strings.TrimSpace(got) != strings.TrimSpace(want) {
			t.Errorf("%s: %s\ngot:\n%s\nwant:\n%s", file, cmd, got, want)
		}
		fmt.Fprintf(&out, "%s\n----\n%s\n\n", cmd, strings.TrimSpace(got))
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(strings.TrimSpace(out.String())+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// step runs one command and says what the core did.
func (s *coreScript) step(f []string) (string, error) {
	if len(f) == 0 {
		return "", errors.New("empty command")
	}
	var eff Effects
	before := s.snapshot()
	switch f[0] {
	case "run":
		s.runs = append(s.runs, s.ct.run())
	case "task":
		if len(f) < 4 || f[2] != "on" {
			return "", errors.New("want: task NAME on W [after ...]")
		}
		var deps []*Task
		if len(f) > 5 && f[4] == "after" {
			for _, d := range f[5:] {
				if s.tasks[d] == nil {
					return "", fmt.Errorf("no task %s", d)
				}
				deps = append(deps, s.tasks[d])
			}
		}
		var w int
		fmt.Sscan(f[3], &w)
		t, e := s.ct.task(s.runs[len(s.runs)-1], w, deps...)
		s.tasks[f[1]], s.names[t] = t, f[1]
		eff = e
	case "finish", "expire":
		t := s.tasks[f[1]]
		if t == nil {
			return "", fmt.Errorf("no task %s", f[1])
		}
		var err error
		if len(f) > 3 && f[2] == "fail" {
			err = Errorf(RuntimeError, "%s", strings.Join(f[3:], " "))
		}
		a := Assignment{Task: t, Pool: t.job.pool, Target: t.job.worker}
		if f[0] == "expire" {
			s.ct.c.expire(a, Errorf(TimeoutError, "past its deadline"), &eff)
		} else {
			s.ct.c.complete(a, err, &eff)
		}
	case "built", "done", "cancel":
		r, err := s.run(f)
		if err != nil {
			return "", err
		}
		switch f[0] {
		case "built":
			s.ct.c.built(r, &eff)
		case "done":
			s.ct.c.done(r, &eff)
		default:
			s.ct.c.cancel(r, Errorf(RuntimeError, "cancelled"), &eff)
		}
	default:
		return "", fmt.Errorf("unknown command %s", f[0])
	}
	return s.describe(eff, before), nil
}

func (s *coreScript) run(f []string) (*Run, error) {
	var n int
	if len(f) < 2 {
		return nil, errors.New("want a run: r1, r2, ...")
	}
	if _, err := fmt.Sscanf(f[1], "r%d", &n); err != nil || n < 1 || n > len(s.runs) {
		return nil, fmt.Errorf("no run %s", f[1])
	}
	return s.runs[n-1], nil
}

// snapshot is every task's state, by name.
func (s *coreScript) snapshot() map[string]string {
	m := map[string]string{}
	for name, t := range s.tasks {
		m[name] = taskState(t)
	}
	return m
}

func taskState(t *Task) string {
	switch {
	case t.done && t.err != nil:
		return "failed " + t.err.Error()
	case t.done:
		return "done"
	case t.pending > 0:
		return fmt.Sprintf("pending %d", t.pending)
	case slices.Contains(t.run.held, t):
		return "held" // ready, behind the runs before its own
	}
	return "ready"
}

// describe says what a step asked for and which tasks it changed.
func (s *coreScript) describe(eff Effects, before map[string]string) string {
	var lines []string
	if len(eff.Assign) > 0 {
		lines = append(lines, "assign "+s.list(eff.Assign))
	}
	if len(eff.Stop) > 0 {
		lines = append(lines, "stop "+s.list(eff.Stop))
	}
	if eff.Fenced != nil {
		lines = append(lines, fmt.Sprintf("fenced r%d", eff.Fenced.id))
	}
	var changed []string
	for name, t := range s.tasks {
		if st := taskState(t); st != before[name] {
			changed = append(changed, name+": "+st)
		}
	}
	slices.Sort(changed)
	lines = append(lines, changed...)
	if len(lines) == 0 {
		return "ok"
	}
	return strings.Join(lines, "\n")
}

func (s *coreScript) list(as []Assignment) string {
	var names []string
	for _, a := range as {
		names = append(names, s.names[a.Task])
	}
	return strings.Join(names, " ")
}
