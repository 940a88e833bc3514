package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"simpler/engine"
	"simpler/golden"
)

// traceScript makes one dependency whose producer is certainly still
// running when the consumer is submitted: the SUB task `gate` holds its
// OUTPUT until the orchestration, after submitting the consumer, opens
// the gate. Before any task, a domain is allocated and released.
const traceScript = `
def gate(args):
    flag = args.tensor(0)
    while flag.read()[0] == 0:
        pass
    args.tensor(1).write(array.arange(4, FLOAT32))

def double(chip, args):
    args.tensor(1).write(args.tensor(0).read() * 2.0)

def orch(o, args, cfg):
    d = o.allocate_domain(name = "ring", workers = [0, 1], window_size = 4096)
    d.release()
    flag = host_tensor(shape = [1], dtype = INT32)
    mid = host_tensor(shape = [4])
    out = host_tensor(shape = [4])
    o.submit_sub(gate, TaskArgs(tensors = [(flag, NO_DEP), (mid, OUTPUT)]))
    o.submit_next_level(double, TaskArgs(tensors = [(mid, INPUT), (out, OUTPUT)]), worker = 1)
    flag.write([1])
    return out

def main(ctx):
    w = Worker(level = 3, platform = ctx.platform, device_ids = ctx.device_ids, num_sub_workers = 1)
    w.register(gate)
    w.register(double)
    w.init()
    print(w.run(orch).read().tolist())
    w.close()
`

type jsonTrace struct {
	TraceEvents []traceJSONEvent `json:"traceEvents"`
}

// traceJSONEvent is a trace event as a test reads it back.
type traceJSONEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	ID   int            `json:"id"`
	Bp   string         `json:"bp"`
	Args map[string]any `json:"args"`
}

func TestRunTrace(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.star": traceScript})
	tracePath := filepath.Join(dir, "trace.json")
	var stdout, stderr bytes.Buffer
	code := Main([]string{"run", "--platform", "a2a3sim", "--devices", "0,1", "--trace", tracePath, filepath.Join(dir, "main.star")}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if got := stdout.String(); got != "[0.0, 2.0, 4.0, 6.0]\n" {
		t.Errorf("stdout: %q", got)
	}
	tr := readTrace(t, tracePath) // which checks nesting and that each flow joins two slices

	var process string
	lanes := map[string]int{}    // lane name → tid (one process: one Worker)
	sliceTid := map[string]int{} // callable → its slice's tid
	var flowTids [][2]int        // each flow's start and end tids
	marks := map[string]bool{}
	for _, e := range tr.TraceEvents {
		switch {
		case e.Ph == "M" && e.Name == "process_name":
			process, _ = e.Args["name"].(string)
		case e.Ph == "M" && e.Name == "thread_name":
			name, _ := e.Args["name"].(string)
			lanes[name] = e.Tid
		case e.Ph == "X":
			sliceTid[e.Name] = e.Tid
		case e.Ph == "s":
			flowTids = append(flowTids, [2]int{e.Tid, 0})
		case e.Ph == "f" && len(flowTids) > 0:
			flowTids[len(flowTids)-1][1] = e.Tid
		case e.Ph == "i":
			marks[e.Name] = true
		}
	}
	if !strings.Contains(process, "level 3") || !strings.Contains(process, "a2a3sim") {
		t.Errorf("process name %q", process)
	}
	sub, chip := lanes["sub_worker 0"], lanes["chip_worker 1 (device 1)"]
	if sub == 0 || chip == 0 || sub == chip {
		t.Errorf("want a lane per endpoint, got %v", lanes)
	}
	if sliceTid["gate"] != sub || sliceTid["double"] != chip {
		t.Errorf("slices on the wrong lanes: gate on %d, double on %d; lanes %v", sliceTid["gate"], sliceTid["double"], lanes)
	}
	if want := [][2]int{{sub, chip}}; !slices.Equal(flowTids, want) {
		t.Errorf("flows between tids %v, want one from gate to double %v", flowTids, want)
	}
	for _, m := range []string{"domain ring allocated", "domain ring released", "domain ring freed", "run 1 fenced"} {
		if !marks[m] {
			t.Errorf("no instant event %q; have %v", m, marks)
		}
	}
}

// readTrace reads the trace at path and fails the test with every problem
// checkTrace finds in it.
func readTrace(t *testing.T, path string) *checkedTrace {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tr, problems := checkTrace(raw)
	if tr == nil {
		t.Fatalf("%v\n%s", problems, raw)
	}
	for _, p := range problems {
		t.Error(p)
	}
	return tr
}

// A --trace file that cannot be created is a usage error, reported
// before the script runs.
func TestRunTraceUnwritable(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.star": "def main(ctx):\n    print(\"ran\")\n"})
	bad := filepath.Join(dir, "no", "such", "dir", "t.json")
	for _, path := range []string{bad, dir} { // a missing directory; a directory
		code, out, errs := runCLI(t, "run", "--trace", path, filepath.Join(dir, "main.star"))
		if code != 2 || out != "" || !strings.Contains(errs, "--trace "+path+": cannot create the file") {
			t.Errorf("--trace %s: exit %d, stdout %q, stderr %q", path, code, out, errs)
		}
	}
}

// lockedBuffer is a bytes.Buffer shared with the progress goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestProgressLine(t *testing.T) {
	var term lockedBuffer
	p := newProgress(&term, 0, time.Millisecond)
	out := p.clearing(&term)
	p.start()
	p.record(1, engine.Event{Kind: engine.TaskSubmitted, Run: 1, Task: 1, Members: 1})
	p.record(1, engine.Event{Kind: engine.TaskSubmitted, Run: 1, Task: 2, Members: 1})
	p.record(1, engine.Event{Kind: engine.TaskStarted, Run: 1, Task: 1})
	p.record(1, engine.Event{Kind: engine.TaskStarted, Run: 1, Task: 2})
	p.record(1, engine.Event{Kind: engine.TaskFinished, Run: 1, Task: 1})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(term.String(), "1/2 tasks done, 1 running") {
		if time.Now().After(deadline) {
			t.Fatalf("no progress line: %q", term.String())
		}
		time.Sleep(time.Millisecond) // polling the other goroutine's output, with a deadline
	}
	if _, err := out.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	p.stop()
	got := term.String()
	if !strings.Contains(got, "running [") || !strings.Contains(got, "\r\x1b[Khello\n") {
		t.Errorf("the line is not cleared before output: %q", got)
	}
	if strings.HasSuffix(got, "]") {
		t.Errorf("the line is left showing after stop: %q", got)
	}
}

// The progress line counts tasks, not members: a group task is done when
// its last member finishes. Tasks of different Workers with the same run
// and task id are different tasks. A task that never ran (its producer
// failed) is done, and failed, at its run's fence.
func TestProgressCounts(t *testing.T) {
	p := newProgress(io.Discard, 0, time.Millisecond)
	ev := func(worker int, kind engine.EventKind, task, member int, err error) {
		p.record(worker, engine.Event{Kind: kind, Run: 1, Task: task, Member: member, Members: 2, Err: err})
	}
	ev(1, engine.TaskSubmitted, 1, 0, nil) // a group of two
	ev(2, engine.TaskSubmitted, 1, 0, nil) // another Worker's task 1, also a group
	ev(1, engine.TaskSubmitted, 2, 0, nil) // a consumer of task 1, never started
	ev(1, engine.TaskStarted, 1, 0, nil)
	ev(1, engine.TaskStarted, 1, 1, nil)
	ev(2, engine.TaskStarted, 1, 0, nil)
	check := func(want string) {
		t.Helper()
		if got := p.line(); !strings.HasPrefix(got, want+" [") {
			t.Errorf("line %q, want %q", got, want)
		}
	}
	check("simpler: 0/3 tasks done, 3 running")
	ev(1, engine.TaskFinished, 1, 0, nil)
	check("simpler: 0/3 tasks done, 2 running")
	ev(1, engine.TaskFinished, 1, 1, errors.New("boom"))
	check("simpler: 1/3 tasks done, 1 running, 1 failed")
	p.record(1, engine.Event{Kind: engine.RunFenced, Run: 1})
	check("simpler: 2/3 tasks done, 1 running, 2 failed")
	ev(2, engine.TaskFinished, 1, 1, nil) // a member cancelled before it started
	check("simpler: 2/3 tasks done, 1 running, 2 failed")
	ev(2, engine.TaskFinished, 1, 0, nil)
	check("simpler: 3/3 tasks done, 0 running, 2 failed")
}

// A global domain's node commands show as spans on each node's lane of
// commands, in transaction order.
func TestRunTraceGlobalSteps(t *testing.T) {
	dir := t.TempDir()
	tracePath := filepath.Join(dir, "trace.json")
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"run", "--trace", tracePath, "../../scripts/examples/global_tload_local.star"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	tr := readTrace(t, tracePath)
	lanes := map[[2]int]string{}   // (pid, tid) → lane name
	steps := map[string][]string{} // lane → commands in time order
	last := map[string]float64{}
	for _, e := range tr.TraceEvents {
		if e.Ph == "M" && e.Name == "thread_name" {
			lanes[[2]int{e.Pid, e.Tid}], _ = e.Args["name"].(string)
		}
	}
	for _, e := range tr.TraceEvents {
		if e.Ph != "X" || !strings.HasPrefix(e.Name, "global ") {
			continue
		}
		lane := lanes[[2]int{e.Pid, e.Tid}]
		if e.Ts < last[lane] {
			t.Errorf("%s on %s starts before the step before it", e.Name, lane)
		}
		last[lane] = e.Ts + e.Dur
		steps[lane] = append(steps[lane], strings.TrimPrefix(e.Name, "global "))
	}
	want := "COMM_INIT PREPARE IMPORT_TABLE COMMIT STAGE_TO RELEASE_DOMAIN"
	for _, lane := range []string{"child_worker 0: global commands", "child_worker 1: global commands"} {
		if got := strings.Join(steps[lane], " "); got != want {
			t.Errorf("%s: global steps %q, want %q", lane, got, want)
		}
	}
}

// On a terminal, a long run shows tasks done out of tasks submitted:
// here one task spins until Ctrl-C, one finishes, and one waits for the
// first.
func TestRunProgressOnTerminal(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.star": `
def spin(chip, args):
    while True:
        pass

def quick(chip, args):
    args.tensor(0).fill(1)

def main(ctx):
    w = Worker(level = 3, platform = ctx.platform, device_ids = [0, 1])
    w.register(spin)
    w.register(quick)
    w.init()
    x = host_tensor(shape = [1])
    y = host_tensor(shape = [1])
    def orch(o, args, cfg):
        o.submit_next_level(spin, TaskArgs(tensors = [(x, OUTPUT_EXISTING)]), worker = 0)
        o.submit_next_level(quick, TaskArgs(tensors = [(y, OUTPUT_EXISTING)]), worker = 1)
        o.submit_next_level(quick, TaskArgs(tensors = [(x, INOUT)]), worker = 1)
    w.run(orch)
`})
	p := startPTY(t, cliEnv(), "run", filepath.Join(dir, "main.star"))
	p.expect("simpler: 1/3 tasks done, 1 running [")
	p.send("\x03") // Ctrl-C
	if code := p.wait(); code != 130 {
		t.Errorf("exit %d after Ctrl-C, want 130; output:\n%s", code, p.output())
	}
}

// A level-2 run(kernel, args) is a task slice on the chip's lane, in
// either mode.
func TestRunTraceLevel2(t *testing.T) {
	t.Setenv(asCLI, "1") // process mode's children are this binary
	for _, mode := range []string{"thread", "process"} {
		tracePath := filepath.Join(t.TempDir(), "trace.json")
		code, _, errs := runCLI(t, "run", "--mode", mode, "--trace", tracePath, "../../scripts/examples/vector_add.star")
		if code != 0 {
			t.Fatalf("%s mode: exit %d\n%s", mode, code, errs)
		}
		tr := readTrace(t, tracePath)
		var got []string
		for _, s := range tr.slices {
			got = append(got, s.cat+" "+s.name+" on "+s.lane)
		}
		if want := "task add on chip_worker 0 (device 0)"; strings.Join(got, "; ") != want {
			t.Errorf("%s mode: slices %q, want %q", mode, got, want)
		}
	}
}

// On a remote node's lane, the node's tasks and the global domain's
// commands overlap in time (the commands of the next domain go out while
// the node still runs a task), so the commands have a lane of their own
// and the trace nests.
func TestRunTraceRemoteCommands(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tracePath := filepath.Join(t.TempDir(), "trace.json")
	r := golden.Runner{Binary: bin, Env: []string{asCLI + "=1"}, Args: append(slices.Clone(golden.DefaultArgs), "--trace", tracePath)}
	script := "../../scripts/examples/global_allreduce_mixed_l3.star" // starts a daemon: # simpler-daemons: 1
	if o := r.Check(script, false); !o.Passed {
		t.Fatalf("%s: %s\n%s", script, o.Problem, o.Diff)
	}
	tr := readTrace(t, tracePath)
	byLane := map[string]map[string]int{} // lane → category → slices
	for _, s := range tr.slices {
		if byLane[s.lane] == nil {
			byLane[s.lane] = map[string]int{}
		}
		byLane[s.lane][s.cat]++
	}
	for _, node := range []string{"child_worker 0", "remote_worker 1"} {
		tasks, cmds := byLane[node], byLane[node+": global commands"]
		if tasks["task"] == 0 || tasks["global"] != 0 || cmds["global"] == 0 || cmds["task"] != 0 {
			t.Errorf("%s: tasks' lane %v, commands' lane %v; want tasks and commands apart", node, tasks, cmds)
		}
	}
}
