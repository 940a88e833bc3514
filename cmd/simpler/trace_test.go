package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"simpler/engine"
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
	TraceEvents []struct {
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
	} `json:"traceEvents"`
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
	raw, err := os.ReadFile(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	var tr jsonTrace
	if err := json.Unmarshal(raw, &tr); err != nil {
		t.Fatalf("the trace is not JSON: %v\n%s", err, raw)
	}

	lanes := map[string]int{} // lane name → tid (one process: one Worker)
	var process string
	type slice struct{ ts, end float64 }
	slices := map[string]slice{} // callable → its slice
	sliceTid := map[string]int{}
	flows := map[int][]int{} // id → indexes of its s and f events
	marks := map[string]bool{}
	for i, e := range tr.TraceEvents {
		switch e.Ph {
		case "M":
			if e.Name == "process_name" {
				process, _ = e.Args["name"].(string)
			}
			if e.Name == "thread_name" {
				name, _ := e.Args["name"].(string)
				lanes[name] = e.Tid
			}
		case "X":
			if e.Dur < 0 {
				t.Errorf("%s has a negative duration", e.Name)
			}
			slices[e.Name] = slice{e.Ts, e.Ts + e.Dur}
			sliceTid[e.Name] = e.Tid
		case "s", "f":
			flows[e.ID] = append(flows[e.ID], i)
		case "i":
			marks[e.Name] = true
		}
	}
	if !strings.Contains(process, "level 3") || !strings.Contains(process, "a2a3sim") {
		t.Errorf("process name %q", process)
	}
	if lanes["sub_worker 0"] == 0 || lanes["chip_worker 1 (device 1)"] == 0 || lanes["sub_worker 0"] == lanes["chip_worker 1 (device 1)"] {
		t.Errorf("want a lane per endpoint, got %v", lanes)
	}
	if sliceTid["gate"] != lanes["sub_worker 0"] || sliceTid["double"] != lanes["chip_worker 1 (device 1)"] {
		t.Errorf("slices on the wrong lanes: gate on %d, double on %d; lanes %v", sliceTid["gate"], sliceTid["double"], lanes)
	}
	if len(flows) != 1 {
		t.Fatalf("want one flow (gate → double), got %d: %v", len(flows), flows)
	}
	for id, idx := range flows {
		if len(idx) != 2 {
			t.Fatalf("flow %d has %d events", id, len(idx))
		}
		s, f := tr.TraceEvents[idx[0]], tr.TraceEvents[idx[1]]
		if s.Ph != "s" || f.Ph != "f" || f.Bp != "e" {
			t.Errorf("flow %d: phases %q, %q (bp %q)", id, s.Ph, f.Ph, f.Bp)
		}
		g, d := slices["gate"], slices["double"]
		if s.Tid != sliceTid["gate"] || s.Ts < g.ts || s.Ts > g.end {
			t.Errorf("flow start %v (tid %d) is not at the end of gate %v", s.Ts, s.Tid, g)
		}
		if f.Tid != sliceTid["double"] || f.Ts < d.ts || f.Ts > d.end {
			t.Errorf("flow end %v (tid %d) is not at the start of double %v", f.Ts, f.Tid, d)
		}
	}
	for _, m := range []string{"domain ring allocated", "domain ring released", "domain ring freed", "run 1 fenced"} {
		if !marks[m] {
			t.Errorf("no instant event %q; have %v", m, marks)
		}
	}
}

func TestRunTraceUnwritable(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.star": "def main(ctx):\n    pass\n"})
	var stdout, stderr bytes.Buffer
	code := Main([]string{"run", "--trace", filepath.Join(dir, "no", "such", "dir", "t.json"), filepath.Join(dir, "main.star")}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "--trace") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
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
	p.record(engine.Event{Kind: engine.TaskStarted})
	p.record(engine.Event{Kind: engine.TaskStarted})
	p.record(engine.Event{Kind: engine.TaskFinished})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(term.String(), "1 tasks done, 1 running") {
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

// A global domain's node commands show as spans on each node's lane, in
// transaction order.
func TestRunTraceGlobalSteps(t *testing.T) {
	dir := t.TempDir()
	tracePath := filepath.Join(dir, "trace.json")
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"run", "--trace", tracePath, "../../scripts/examples/global_tload_local.star"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	raw, err := os.ReadFile(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	var tr jsonTrace
	if err := json.Unmarshal(raw, &tr); err != nil {
		t.Fatal(err)
	}
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
	for _, lane := range []string{"child_worker 0", "child_worker 1"} {
		if got := strings.Join(steps[lane], " "); got != want {
			t.Errorf("%s: global steps %q, want %q", lane, got, want)
		}
	}
}
