package starlib

import (
	"strings"
	"testing"
)

const selfWaitScript = `
def noop(chip, args):
    pass

def main(ctx):
    w = Worker(level = 3, device_ids = [0])
    w.register(noop)
    w.init()
    other = Worker(level = 3, device_ids = [1])
    other.register(noop)
    other.init()
    earlier = w.submit(lambda o, a, c: o.submit_next_level(noop, TaskArgs(), worker = 0))
    seen = {}
    def inner(o, a, c):
        o.submit_next_level(noop, TaskArgs(), worker = 0)
    def outer(o, a, c):
        o.submit_next_level(noop, TaskArgs(), worker = 0)
        print("run:", catch(w.run, inner))
        r = w.submit(inner)
        seen["r"] = r
        print("wait:", catch(r.wait))
        print("bounded wait:", catch(r.wait, 5))
        print("result:", catch(r.result))
        print("an earlier run:", catch(earlier.wait))
        print("another worker:", catch(other.run, inner))
        print("close:", catch(w.close))
        return "outer done"
    print("outer:", w.run(outer))
    print("inner after:", catch(seen["r"].wait), seen["r"].done)
    print("run with a deadline:", catch(w.run, inner, None, CallConfig(timeout_s = 2)))
    print("submit with a deadline:", catch(w.submit, inner, config = CallConfig(timeout_s = 2)))
    print("config passed as it is:", w.run(lambda o, a, c: c, None, (1, "two")))
    w.close()
    other.close()
    one = Worker(level = 2, device_id = 0)
    one.register(noop)
    one.init()
    print("level 2 with a deadline:", catch(one.run, noop, None, CallConfig(timeout_s = 2)))
    print("level 2 config:", catch(one.run, noop, None, (1, 2)))
    print("level 2 plain:", one.run(noop, None, CallConfig()))
    one.close()
`

// TestRunInsideOrchestrationRefused: w.run, and waiting on a later run of
// the same Worker (wait, result), from inside its orchestration function
// are refused with a RuntimeError saying why, and nothing hangs; a wait
// on an earlier run, or a run of another Worker, is allowed. A CallConfig
// with timeout_s given to run or submit is refused, not ignored, and a
// level-2 run's config must be a CallConfig.
func TestRunInsideOrchestrationRefused(t *testing.T) {
	out, err := runScript(t, map[string]string{"main.star": selfWaitScript})
	if err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	why := "called from inside the orchestration function of run 2 of this Worker; its runs finish in order, so this would wait for run 2, which cannot finish before that function returns: it would never return."
	for _, want := range []string{
		"run: RuntimeError: run: " + why,
		"wait: RuntimeError: wait: " + why,
		"bounded wait: RuntimeError: wait: " + why,
		"result: RuntimeError: result: " + why,
		"an earlier run: None\n",
		"another worker: None\n",
		"close: RuntimeError: close: run 2 is still being built; close() cannot be called from inside an orchestration function\n",
		"outer: outer done\n",
		"inner after: None True\n",
		"run with a deadline: ValueError: run: config has timeout_s=2, but a run has no deadline",
		"submit with a deadline: ValueError: submit: config has timeout_s=2, but a run has no deadline",
		"config passed as it is: (1, \"two\")\n",
		"level 2 with a deadline: ValueError: run: config has timeout_s=2, but a level-2 run(kernel, args) has no deadline",
		"level 2 config: TypeError: run: config must be a CallConfig, got tuple\n",
		"level 2 plain: None\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

const childOrchWorkerScript = `
def node_orch(o, args, config):
    Worker(level = 3, device_ids = [0])

def main(ctx):
    top = Worker(level = 4)
    top.add_worker(Worker(level = 3, device_ids = [0]))
    top.register(node_orch)
    top.init()
    print("node:", catch(top.run, lambda o, a, c: o.submit_next_level(node_orch, TaskArgs(), worker = 0)))
    top.close()
`

// TestWorkerRefusedInAChildOrchestration: a child worker's orchestration
// function is a task too, and may not make a Worker.
func TestWorkerRefusedInAChildOrchestration(t *testing.T) {
	out, err := runScript(t, map[string]string{"main.star": childOrchWorkerScript})
	if err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	want := "Worker() inside a child worker's orchestration function: a task runs on a Worker and may not make one"
	if !strings.Contains(out, "node: RuntimeError: ") || !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}
