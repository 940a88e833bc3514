package core

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Data-driven tests, in the style of etcd-io/raft's testdata: each file
// under testdata is a script of steps on one core, each step a command, a
// line "----", and what the step gave, then a blank line. The core is
// stepped directly, at the level of tags and byte ranges: no engine, no
// goroutines. A block whose command starts with # is a comment.
//
// Commands:
//
//	config [window N] [order_hazards]   make the core (before any step; default window 16)
//	run                                 begin the next run (r1, r2, ...), being built
//	submit NAME [on W | group W... | sub | subgroup K] [held] ACCESS...
//	                                    submit a task of the last run; an ACCESS is
//	                                    reads/writes/inout/nodep BUF[LO:HI] (contiguous bytes)
//	                                    or BUF[LO+ROWSxSTRIDE:ROWBYTES] (strided rows)
//	unhold NAME                         a held task may run
//	complete NAME [member M] ok|fail MSG|notstarted|stopped
//	                                    the endpoint reports a member back
//	deadline NAME [member M] N          the running member must end within N ticks
//	tick N                              the clock moves N ticks on; the core is advanced to it
//	built RUN | done RUN | cancel RUN   the run's function returned / it is cleaned up / cancel it
//	window RUN                          whether the run's next submit must wait
//
// Each step prints what the core asked for ("assign", "stop", "fenced",
// with the run's first error or cancel report), the pairs that touch the
// same bytes and were left unordered (what --race reports as "no edge"),
// and the state of every task it changed. `go test -run TestData
// -rewrite` rewrites the expectations from what the core does.

var rewrite = flag.Bool("rewrite", false, "rewrite the testdata expectations")

func TestData(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if len(files) == 0 {
		t.Fatal("no testdata/*.txt")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { runScript(t, file) })
	}
}

func runScript(t *testing.T, file string) {
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := &script{tasks: map[string]*Task{}, bufs: map[string]uint64{}}
	var out strings.Builder
	for _, block := range strings.Split(strings.TrimSpace(string(src)), "\n\n") {
		cmd, want, ok := strings.Cut(block, "\n----\n")
		if !ok {
			cmd, want, _ = strings.Cut(block, "\n----")
		}
		if strings.HasPrefix(cmd, "#") {
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

// script is one file's core and the names its steps gave.
type script struct {
	c         *Core
	runs      []*Run
	tasks     map[string]*Task
	order     []string          // task names in submit order
	bufs      map[string]uint64 // buffer names, each its own space
	unordered []string          // pairs left unordered by the last step
	now       int64             // the clock, in ticks
}

func (s *script) core() *Core {
	if s.c == nil {
		s.configure(nil)
	}
	return s.c
}

func (s *script) configure(args []string) error {
	cfg := Config{Next: 4, Sub: 2, Window: 16, NotStarted: errNotStarted}
	cfg.Fail = func(a Assignment, err error) error {
		return fmt.Errorf("%s on %s %d: %w", a.Task.Payload, a.Pool, a.Target, err)
	}
	cfg.Late = func(a Assignment, limit int64) error {
		return fmt.Errorf("past its deadline of %d ticks", limit)
	}
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "order_hazards":
			cfg.OrderHazards = true
		case "window":
			if i+1 == len(args) {
				return errors.New("window wants a number")
			}
			n, err := strconv.Atoi(args[i+1])
			if err != nil {
				return err
			}
			cfg.Window, i = n, i+1
		default:
			return fmt.Errorf("unknown config %q", args[i])
		}
	}
	s.c = New(cfg)
	return nil
}

// step runs one command and says what the core did.
func (s *script) step(f []string) (string, error) {
	if len(f) == 0 {
		return "", errors.New("empty command")
	}
	var eff Effects
	before := s.snapshot()
	s.unordered = nil
	var note string
	var err error
	switch f[0] {
	case "config":
		if s.c != nil {
			return "", errors.New("config comes before every other step")
		}
		err = s.configure(f[1:])
	case "run":
		r := &Run{}
		s.core().Begin(r, uint64(len(s.runs)+1), false)
		r.ObserveEdges(s.edge)
		s.runs = append(s.runs, r)
	case "submit":
		err = s.submit(f[1:], &eff)
	case "unhold":
		var t *Task
		if t, err = s.task(f); err == nil {
			s.core().Unhold(t, &eff)
		}
	case "complete", "deadline":
		err = s.report(f, &eff)
	case "tick":
		var n int64
		if len(f) != 2 {
			return "", errors.New("want: tick N")
		}
		if n, err = strconv.ParseInt(f[1], 10, 64); err == nil {
			s.now += n
			s.core().Advance(s.now, &eff)
			note = fmt.Sprintf("now %d", s.now)
		}
	case "built", "done", "cancel", "window":
		note, err = s.runStep(f, &eff)
	default:
		return "", fmt.Errorf("unknown command %s", f[0])
	}
	if err != nil {
		return "", err
	}
	return s.describe(eff, before, note), nil
}

// edge hears every pair touching the same bytes; the unordered ones are
// printed.
func (s *script) edge(t, p *Task, h Hazard) {
	if h == ReadAfterWrite || t.run.ordered {
		return
	}
	what := "write after read"
	if h == WriteAfterWrite {
		what = "write after write"
	}
	s.unordered = append(s.unordered, fmt.Sprintf("unordered %s after %s (%s)", t.Payload, p.Payload, what))
}

func (s *script) task(f []string) (*Task, error) {
	if len(f) < 2 || s.tasks[f[1]] == nil {
		return nil, fmt.Errorf("%s: no such task", strings.Join(f, " "))
	}
	return s.tasks[f[1]], nil
}

func (s *script) run(f []string) (*Run, error) {
	var n int
	if len(f) < 2 {
		return nil, errors.New("want a run: r1, r2, ...")
	}
	if _, err := fmt.Sscanf(f[1], "r%d", &n); err != nil || n < 1 || n > len(s.runs) {
		return nil, fmt.Errorf("no run %s", f[1])
	}
	return s.runs[n-1], nil
}

// submit parses "NAME [on W | group W... | sub | subgroup K] [held]
// ACCESS..." and
// submits the task to the last run.
func (s *script) submit(f []string, eff *Effects) error {
	if len(f) == 0 || len(s.runs) == 0 {
		return errors.New("submit wants a name, after a run")
	}
	name, f := f[0], f[1:]
	job, members := Job{Pool: NextLevel}, 1
	switch {
	case len(f) >= 2 && f[0] == "on":
		w, err := strconv.Atoi(f[1])
		if err != nil {
			return err
		}
		job.Worker, f = w, f[2:]
	case len(f) >= 1 && f[0] == "sub":
		job.Pool, f = Sub, f[1:]
	case len(f) >= 2 && f[0] == "subgroup":
		k, err := strconv.Atoi(f[1])
		if err != nil {
			return err
		}
		job.Pool, job.SubGroup, members, f = Sub, k, k, f[2:]
	case len(f) >= 1 && f[0] == "group":
		job.Worker, f = -1, f[1:]
		for len(f) > 0 {
			w, err := strconv.Atoi(f[0])
			if err != nil {
				break
			}
			job.Group, f = append(job.Group, w), f[1:]
		}
		members = len(job.Group)
	}
	held := len(f) > 0 && f[0] == "held"
	if held {
		f = f[1:]
	}
	t := &Task{Payload: name}
	r := s.runs[len(s.runs)-1]
	s.core().Submit(r, t, job, members)
	if len(f)%2 != 0 {
		return fmt.Errorf("accesses come in pairs (tag, range): %v", f)
	}
	for i := 0; i < len(f); i += 2 {
		if err := s.access(r, t, f[i], f[i+1]); err != nil {
			return err
		}
	}
	s.tasks[name] = t
	s.order = append(s.order, name)
	s.core().Add(t, held, eff)
	return nil
}

var (
	contiguous = regexp.MustCompile(`^(\w+)\[(\d+):(\d+)\]$`)
	strided    = regexp.MustCompile(`^(\w+)\[(\d+)\+(\d+)x(\d+):(\d+)\]$`)
)

// access records one access of t: its tag and its bytes.
func (s *script) access(r *Run, t *Task, tag, where string) error {
	var reads, writes bool
	switch tag {
	case "reads":
		reads = true
	case "writes":
		writes = true
	case "inout":
		reads, writes = true, true
	case "nodep":
		return nil
	default:
		return fmt.Errorf("unknown tag %q", tag)
	}
	num := func(x string) uint64 { n, _ := strconv.ParseUint(x, 10, 64); return n }
	if m := contiguous.FindStringSubmatch(where); m != nil {
		r.Access(t, s.space(m[1]), num(m[2]), num(m[3]), reads, writes)
		return nil
	}
	if m := strided.FindStringSubmatch(where); m != nil {
		l := Layout{Addr: num(m[2]), Elem: num(m[5]), Dims: []Dim{{N: num(m[3]), Stride: num(m[4])}}}
		r.AccessStrided(t, s.space(m[1]), l, reads, writes)
		return nil
	}
	return fmt.Errorf("bad range %q: want BUF[LO:HI] or BUF[LO+ROWSxSTRIDE:ROWBYTES]", where)
}

// space is buffer name's own address space.
func (s *script) space(name string) SpaceKey {
	id, ok := s.bufs[name]
	if !ok {
		id = uint64(len(s.bufs) + 1)
		s.bufs[name] = id
	}
	return SpaceKey{Space: -1, Buf: id}
}

// report parses "complete NAME [member M] OUTCOME" or "deadline NAME
// [member M] TICKS" and steps the core.
func (s *script) report(f []string, eff *Effects) error {
	t, err := s.task(f)
	if err != nil {
		return err
	}
	m, rest := 0, f[2:]
	if len(rest) >= 2 && rest[0] == "member" {
		if m, err = strconv.Atoi(rest[1]); err != nil {
			return err
		}
		rest = rest[2:]
	}
	a, ok := s.running(t, m)
	if !ok {
		return fmt.Errorf("%s member %d is not running", f[1], m)
	}
	if f[0] == "deadline" {
		if len(rest) != 1 {
			return errors.New("want: deadline NAME [member M] TICKS")
		}
		n, err := strconv.ParseInt(rest[0], 10, 64)
		if err != nil {
			return err
		}
		s.core().Arm(a, s.now+n, n, eff)
		return nil
	}
	var outcome error
	switch {
	case len(rest) == 1 && rest[0] == "ok":
	case len(rest) == 1 && rest[0] == "notstarted":
		outcome = fmt.Errorf("stopped: %w", errNotStarted)
	case len(rest) == 1 && rest[0] == "stopped":
		outcome = errors.New("stopped while it ran")
	case len(rest) >= 2 && rest[0] == "fail":
		outcome = errors.New(strings.Join(rest[1:], " "))
	default:
		return fmt.Errorf("want ok, fail MSG, notstarted or stopped: %v", rest)
	}
	s.core().Complete(a, outcome, eff)
	return nil
}

// running is member m of t as the core started it.
func (s *script) running(t *Task, m int) (Assignment, bool) {
	for p := range s.c.active {
		for e := range s.c.active[p] {
			for _, x := range s.c.active[p][e] {
				if x.task == t && x.index == m {
					return Assignment{Task: t, Member: m, Pool: Pool(p), Target: e}, true
				}
			}
		}
	}
	return Assignment{}, false
}

// runStep is built, done, cancel or window of a run.
func (s *script) runStep(f []string, eff *Effects) (string, error) {
	r, err := s.run(f)
	if err != nil {
		return "", err
	}
	switch f[0] {
	case "built":
		s.core().Built(r, eff)
	case "done":
		s.core().Done(r, eff)
	case "cancel":
		s.core().Cancel(r, fmt.Errorf("run %d cancelled", r.id), eff)
	case "window":
		if s.core().WindowFull(r) {
			return "window full", nil
		}
		return "window open", nil
	}
	return "", nil
}

// snapshot is every task's state, by name.
func (s *script) snapshot() map[string]string {
	m := map[string]string{}
	for name, t := range s.tasks {
		m[name] = s.state(t)
	}
	return m
}

func (s *script) state(t *Task) string {
	switch {
	case t.done && t.err != nil:
		return "failed: " + t.err.Error()
	case t.done:
		return "done"
	case t.pending > 0:
		return fmt.Sprintf("pending %d", t.pending)
	case t.run.Held(t):
		return "held" // ready, behind the runs before its own
	}
	for m := 0; m < max(len(t.job.Group), t.job.SubGroup, 1); m++ {
		if _, ok := s.running(t, m); ok {
			return "running"
		}
	}
	return "queued"
}

// describe says what a step asked for and which tasks it changed.
func (s *script) describe(eff Effects, before map[string]string, note string) string {
	var lines []string
	if note != "" {
		lines = append(lines, note)
	}
	if len(eff.Assign) > 0 {
		lines = append(lines, "assign "+s.list(eff.Assign))
	}
	if len(eff.Stop) > 0 {
		lines = append(lines, "stop "+s.list(eff.Stop))
	}
	switch {
	case eff.Deadline == NoDeadline:
		lines = append(lines, "no deadline left")
	case eff.Deadline != 0:
		lines = append(lines, fmt.Sprintf("next deadline %d", eff.Deadline))
	}
	if r := eff.Fenced; r != nil {
		lines = append(lines, fmt.Sprintf("fenced r%d", r.id))
		if err := r.FirstErr(); err != nil {
			lines = append(lines, "  first error: "+err.Error())
		}
		if r.Cut() {
			notStarted, stopped := r.CancelReport()
			lines = append(lines, fmt.Sprintf("  cancel cut: not started %v, stopped %v", notStarted, stopped))
		}
	}
	lines = append(lines, s.unordered...)
	for _, name := range s.order {
		if st := s.state(s.tasks[name]); st != before[name] {
			lines = append(lines, name+": "+st)
		}
	}
	if len(lines) == 0 {
		return "ok"
	}
	return strings.Join(lines, "\n")
}

// list names assignments: a single task by its name, a group's member as
// NAME.M, each with where it runs.
func (s *script) list(as []Assignment) string {
	var names []string
	for _, a := range as {
		name := fmt.Sprint(a.Task.Payload)
		if a.Task.job.isGroup() {
			name += fmt.Sprintf(".%d", a.Member)
		}
		names = append(names, fmt.Sprintf("%s@%s%d", name, a.Pool, a.Target))
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}
