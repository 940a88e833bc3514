package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The second family of metamorphic programs keeps upstream's tag rules
// (no order_hazards), so it can also run on a remote node, whose Worker
// has upstream's rules: every host tensor a task touches is INOUT, so any
// two overlapping accesses are a write then a read of the same bytes and
// are ordered under either rule (a heap intermediate is written OUTPUT
// once, then only read). The programs add what the first family has
// not: scopes with heap intermediates, group tasks, planted failures
// that poison their consumers, and stalls past their deadlines. Each
// runs in thread and process mode, under two deterministic schedules,
// under --race (which must find nothing), with a heap ring so small that
// the rings wrap and submits wait for space, and on a remote node; every
// run must print the same tensors, or fail with the same first error.

// upstreamProgram is program number n of the second family.
func upstreamProgram(n uint64) string {
	r := rand.New(rand.NewPCG(n, 0xface))
	var b strings.Builder
	b.WriteString(`
def step(chip, args):
    # The sums of tensors 0..k-1, with the task's number, fill tensor k.
    total = args.scalar(0)
    for i in range(args.scalar(1)):
        for v in args.tensor(i).read().tolist():
            total += v
    out = args.tensor(args.scalar(1))
    out.write([(total + 7 * i) % 1000003 for i in range(out.shape[0])])

def boom(chip, args):
    fail("planted failure in task %d" % args.scalar(0))

def stall(chip, args):
    # Past its deadline, stopped at a step of this loop.
    for i in range(1000000000):
        pass

def body(o, ts):
`)
	fails := r.IntN(3) == 0
	tasks := 5 + r.IntN(8)
	for k := 1; k <= tasks; k++ {
		switch r.IntN(5) {
		case 0: // a scope: an intermediate written from the tensors, then read into them
			rs := disjointRanges(r, 2)
			m := 1 + r.IntN(16)
			fmt.Fprintf(&b, "    o.scope_begin()\n    tmp = o.alloc([%d], INT32)\n", m)
			fmt.Fprintf(&b, "    o.submit_next_level(step, TaskArgs(tensors = [(%s, INOUT), (tmp, OUTPUT)], scalars = [%d, 1]), worker = %d)\n", rs[0], k, r.IntN(2))
			fmt.Fprintf(&b, "    o.submit_next_level(step, TaskArgs(tensors = [(tmp, INPUT), (%s, INOUT)], scalars = [%d, 1]), worker = %d)\n", rs[1], 100+k, r.IntN(2))
			b.WriteString("    o.scope_end()\n")
		case 1: // a group of two members on both chips, touching disjoint bytes
			rs := disjointRanges(r, 4)
			fmt.Fprintf(&b, "    o.submit_next_level_group(step, [TaskArgs(tensors = [(%s, INOUT), (%s, INOUT)], scalars = [%d, 1]), TaskArgs(tensors = [(%s, INOUT), (%s, INOUT)], scalars = [%d, 1])], workers = [0, 1])\n",
				rs[0], rs[1], k, rs[2], rs[3], 200+k)
		default:
			nin := 1 + r.IntN(2)
			rs := disjointRanges(r, nin+1)
			callable, config := "step", ""
			if fails && r.IntN(4) == 0 {
				callable = "boom"
				if r.IntN(2) == 0 {
					callable, config = "stall", ", config = CallConfig(timeout_s = 0.05)"
				}
			}
			parts := make([]string, len(rs))
			for i, x := range rs {
				parts[i] = fmt.Sprintf("(%s, INOUT)", x)
			}
			fmt.Fprintf(&b, "    o.submit_next_level(%s, TaskArgs(tensors = [%s], scalars = [%d, %d]), worker = %d%s)\n",
				callable, strings.Join(parts, ", "), k, nin, r.IntN(2), config)
		}
	}
	b.WriteString(`
def orch(o, args, cfg):
    body(o, [args.tensor(0), args.tensor(1), args.tensor(2)])

def start(j):
    return host_tensor(data = [100 * j + i for i in range(64)], dtype = INT32)

def main(ctx):
    how = ctx.argv[0] if ctx.argv else ""
    if how.startswith("remote="):
        w = Worker(level = 4, platform = ctx.platform)
        node = w.add_remote_worker(endpoint = how[len("remote="):], platform = ctx.platform, device_ids = [0, 1])
        for f in [step, boom, stall, orch]:
            w.register(f)
        w.init()
        bufs = [w.remote_malloc(worker = node, nbytes = 256) for j in range(3)]
        for j in range(3):
            w.remote_copy_to(bufs[j], start(j), 256)
        def top(o, args, cfg):
            refs = [(RemoteTensorRef(h, shape = [64], dtype = INT32), INOUT) for h in bufs]
            o.submit_next_level(orch, TaskArgs(tensors = refs), worker = node)
        w.run(top)
        for h in bufs:
            t = host_tensor(shape = [64], dtype = INT32)
            w.remote_copy_from(h, t, 256)
            print(t.read().tolist())
        w.close()
        return
    heap = int(how[len("heap="):]) if how.startswith("heap=") else None
    w = Worker(level = 3, platform = ctx.platform, device_ids = ctx.device_ids[:2], mode = ctx.mode, heap_ring_size = heap)
    for f in [step, boom, stall]:
        w.register(f)
    w.init()
    ts = [start(j) for j in range(3)]
    w.run(orch, TaskArgs(tensors = [(t, INOUT) for t in ts]))
    for t in ts:
        print(t.read().tolist())
    w.close()
`)
	return b.String()
}

// disjointRanges is k views of random parts of random tensors that share
// no byte: a task may not write overlapping bytes twice, and the members
// of a group are not ordered with each other.
func disjointRanges(r *rand.Rand, k int) []string {
	type span struct{ t, lo, hi int }
	var got []span
	for len(got) < k {
		n := 1 + r.IntN(tensorElems/4)
		s := span{r.IntN(3), 0, 0}
		s.lo = r.IntN(tensorElems - n + 1)
		s.hi = s.lo + n
		ok := true
		for _, g := range got {
			if g.t == s.t && g.lo < s.hi && s.lo < g.hi {
				ok = false
			}
		}
		if ok {
			got = append(got, s)
		}
	}
	out := make([]string, k)
	for i, s := range got {
		out[i] = fmt.Sprintf("ts[%d].view(shape = [%d], offset = %d)", s.t, s.hi-s.lo, 4*s.lo)
	}
	return out
}

// plantedFailure is the part of a run's error that names the failed task
// and callable and why it failed, the same whichever node the task ran
// on: a planted failure, or a stall past its deadline (in virtual time
// under --seed).
var plantedFailure = regexp.MustCompile(`task \d+ running "(boom" failed: .*planted failure in task \d+|stall" failed: past its deadline of 50ms)`)

// TestMetamorphicUpstreamPrograms runs the second family in every
// configuration; SIMPLER_METAMORPHIC=N runs N programs instead of four.
func TestMetamorphicUpstreamPrograms(t *testing.T) {
	programs := uint64(4)
	if n := os.Getenv("SIMPLER_METAMORPHIC"); n != "" {
		fmt.Sscan(n, &programs)
	}
	_, addr := startRemoteDaemon(t)
	configs := [][]string{{"--mode", "thread"}, {"--mode", "process"}, {"--seed", "3"}, {"--seed", "4", "--strategy", "random"}, {"--race", "--mode", "thread"},
		{"--mode", "thread", "@", "heap=4096"}, {"--mode", "process", "@", "heap=4096"}, {"@", "remote=" + addr}}
	dir := t.TempDir()
	failed := 0
	for n := uint64(0); n < programs; n++ {
		name := fmt.Sprintf("u%d.star", n)
		prog := upstreamProgram(n)
		writeFiles(t, dir, map[string]string{name: prog})
		var first string
		for i, cfg := range configs {
			flags, argv, _ := strings.Cut(strings.Join(cfg, " "), "@")
			args := append(append([]string{"run"}, strings.Fields(flags)...), name)
			args = append(args, strings.Fields(argv)...)
			code, out, stderr := runChild(t, dir, args...)
			got := out
			if code != 0 {
				got = fmt.Sprintf("exit %d: %s", code, plantedFailure.FindString(stderr))
				if !strings.Contains(prog, "(boom,") && !strings.Contains(prog, "(stall,") || !plantedFailure.MatchString(stderr) {
					t.Fatalf("program %d %v: exit %d\n%s%s\n%s", n, cfg, code, out, stderr, prog)
				}
			} else if strings.Count(out, "\n") != 3 {
				t.Fatalf("program %d %v printed\n%s", n, cfg, out)
			}
			if i == 0 {
				first = got
				if code != 0 {
					failed++
				}
			} else if got != first {
				t.Fatalf("program %d: %v gave\n%s\nbut %v gave\n%s\nprogram:\n%s", n, configs[0], first, cfg, got, prog)
			}
		}
	}
	t.Logf("%d programs, %d of them failing as planted, agreed in %d configurations", programs, failed, len(configs))
}
