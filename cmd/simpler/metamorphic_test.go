package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// A metamorphic test of the engine: a seeded generator writes random
// programs (tasks that read and write random byte ranges of three host
// tensors, on random chips, with random tags), each runs in several
// configurations, and every configuration must print the same result.
// The programs use order_hazards=True, so every conflicting pair is
// ordered and the result is defined; what varies is how the engine gets
// there: thread mode, process mode, and two deterministic schedules. The
// engine split (issue 27) keeps it green. SIMPLER_METAMORPHIC=N runs N
// programs instead of three.

const tensorElems = 64

// metamorphicProgram is program number n of the generator.
func metamorphicProgram(n uint64) string {
	r := rand.New(rand.NewPCG(n, 0x5eed))
	var b strings.Builder
	b.WriteString(`
def step(chip, args):
    # The inputs' sums, with the task's number, fill the output range.
    total = args.scalar(0)
    for i in range(args.scalar(1)):
        for v in args.tensor(i).read().tolist():
            total += v
    out = args.tensor(args.scalar(1))
    out.write([(total + 7 * i) % 1000003 for i in range(out.shape[0])])

def orch(o, args, cfg):
    ts = [args.tensor(0), args.tensor(1), args.tensor(2)]
`)
	tasks := 6 + r.IntN(10)
	for k := 0; k < tasks; k++ {
		nin := 1 + r.IntN(2)
		var parts []string
		for i := 0; i < nin; i++ {
			parts = append(parts, fmt.Sprintf("(%s, INPUT)", randomRange(r)))
		}
		tag := []string{"OUTPUT_EXISTING", "INOUT"}[r.IntN(2)]
		parts = append(parts, fmt.Sprintf("(%s, %s)", randomRange(r), tag))
		fmt.Fprintf(&b, "    o.submit_next_level(step, TaskArgs(tensors = [%s], scalars = [%d, %d]), worker = %d)\n",
			strings.Join(parts, ", "), k+1, nin, r.IntN(2))
	}
	b.WriteString(`
def main(ctx):
    w = Worker(level = 3, platform = ctx.platform, device_ids = ctx.device_ids[:2], mode = ctx.mode, order_hazards = True)
    w.register(step)
    w.init()
    ts = [host_tensor(data = [100 * j + i for i in range(64)], dtype = INT32) for j in range(3)]
    w.run(orch, TaskArgs(tensors = [(t, INOUT) for t in ts]))
    for t in ts:
        print(t.read().tolist())
    w.close()
`)
	return b.String()
}

// randomRange is a view of a random part of a random tensor.
func randomRange(r *rand.Rand) string {
	n := 1 + r.IntN(tensorElems/2)
	off := r.IntN(tensorElems - n + 1)
	return fmt.Sprintf("ts[%d].view(shape = [%d], offset = %d)", r.IntN(3), n, 4*off)
}

func TestMetamorphicPrograms(t *testing.T) {
	programs := uint64(3)
	if n := os.Getenv("SIMPLER_METAMORPHIC"); n != "" {
		fmt.Sscan(n, &programs)
	}
	configs := [][]string{{"--mode", "thread"}, {"--mode", "process"}, {"--seed", "1"}, {"--seed", "2"}}
	dir := t.TempDir()
	for n := uint64(0); n < programs; n++ {
		name := fmt.Sprintf("p%d.star", n)
		writeFiles(t, dir, map[string]string{name: metamorphicProgram(n)})
		var first string
		for i, cfg := range configs {
			code, out, stderr := runChild(t, dir, append(append([]string{"run"}, cfg...), name)...)
			if code != 0 || strings.Count(out, "\n") != 3 {
				t.Fatalf("program %d %v: exit %d\n%s%s\n%s", n, cfg, code, out, stderr, metamorphicProgram(n))
			}
			if i == 0 {
				first = out
			} else if out != first {
				t.Fatalf("program %d: %v printed\n%s\nbut %v printed\n%s\nprogram:\n%s", n, configs[0], first, cfg, out, metamorphicProgram(n))
			}
		}
	}
}
