package starlib

import (
	"strings"
	"testing"
)

// inPlaceScript checks the in-place tensor operations against the
// copying ones a script would otherwise write: t.add_(u) against
// t.read() + u.read(), t.max_ and t.min_ against Python's max and min of
// every element, t.copy_ against write, accumulate against add_, over
// every dtype of a2a3sim and odd sizes (1 element to past 4 KiB).
const inPlaceScript = `
DTS = [FLOAT32, FLOAT16, BFLOAT16, INT8, INT16, INT32, INT64, UINT8, UINT16, UINT32, UINT64, BOOL]
WIDE = {INT8: 127, INT16: 32767, INT32: 2147483647, UINT8: 255, UINT16: 65535, UINT32: 4294967295,
        INT64: 9223372036854775807, UINT64: 18446744073709551615}

def vals(dt, n, seed):
    # Integers: values near both ends, so that sums wrap. Floats: small
    # integers and fractions that float16/bfloat16 must round.
    out = []
    for i in range(n):
        k = (i * 7919 + seed * 104729) % 201 - 100
        if dt == BOOL:
            out.append(k % 3 == 0)
        elif dt in WIDE:
            top = WIDE[dt]
            if dt in [UINT8, UINT16, UINT32, UINT64]:
                out.append((top - k * 3) if k > 0 else (-k * 5))
            else:
                out.append((top - k) if k > 0 else (-top - 1 - k))
        else:
            out.append(k * 1.37)
    return array.from_list(out, dtype = dt)

def pick(xs, ys, fn):
    return [fn(x, y) for x, y in zip(xs, ys)]

def main(ctx):
    checked = 0
    for dt in DTS:
        for n in [1, 7, 33, 1027]:
            a = vals(dt, n, 1)
            b = vals(dt, n, 2)
            t, u = host_tensor(data = a), host_tensor(data = b)
            t.add_(u)
            assert.eq(t.read().tolist(), (a + b).tolist(), "add_ %s %d" % (dt, n))
            acc = host_tensor(data = a)
            acc.accumulate(u)
            assert.eq(acc.read().tolist(), t.read().tolist(), "accumulate %s %d" % (dt, n))
            for name, fn in [("max_", max), ("min_", min)]:
                t = host_tensor(data = a)
                getattr(t, name)(u)
                want = array.from_list(pick(a.tolist(), b.tolist(), fn), dtype = dt)
                assert.eq(t.read().tolist(), want.tolist(), "%s %s %d" % (name, dt, n))
            t = host_tensor(shape = [n], dtype = dt)
            t.copy_(u)
            assert.eq(t.read().tolist(), b.tolist(), "copy_ %s %d" % (dt, n))
            # t.add_(t) doubles in place
            t = host_tensor(data = a)
            t.add_(t)
            assert.eq(t.read().tolist(), (a + a).tolist(), "add_ self %s %d" % (dt, n))
            checked += 1
    print("checked", checked)
    # 64-bit integers add exactly, past 2^53.
    x = host_tensor(data = array.from_list([9223372036854775809, 18446744073709551614], dtype = UINT64))
    y = host_tensor(data = array.from_list([4611686018427387907, 5], dtype = UINT64))
    x.accumulate(y)
    print("uint64", x.read().tolist())
    x = host_tensor(data = array.from_list([9007199254740993], dtype = INT64))
    x.add_(host_tensor(data = array.from_list([1], dtype = INT64)))
    print("int64", x.read().tolist())
    f = host_tensor(shape = [4], dtype = FLOAT32)
    print("count:", catch(lambda: f.add_(host_tensor(shape = [5], dtype = FLOAT32))))
    print("dtype:", catch(lambda: f.copy_(host_tensor(shape = [4], dtype = INT32))))
    print("type:", catch(lambda: f.max_([1, 2, 3, 4])))
    # The same count in another shape is fine.
    g = host_tensor(data = array.arange(4, FLOAT32))
    f.view(shape = [2, 2]).copy_(g)
    print("reshaped copy:", f.read().tolist())
`

func TestInPlaceOpsMatchTheCopyingOnes(t *testing.T) {
	out, err := runScript(t, map[string]string{"main.star": inPlaceScript})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		"checked 48",
		"uint64 [13835058055282163716, 3]",
		"int64 [9007199254740994]",
		"count: ValueError: add_: 5 float32 elements into a tensor of 4 float32",
		"dtype: ValueError: copy_: 4 int32 elements into a tensor of 4 float32",
		"type: TypeError: max_: want a Tensor, got list",
		"reshaped copy: [0.0, 1.0, 2.0, 3.0]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// reduceIntoScript runs comm.reduce_into and chip.reduce_into in kernels:
// three sources of odd length into one destination and into a list of
// two, every op, and the errors.
const reduceIntoScript = `
N = 4099

def kernel(chip, args):
    comm = chip.comm(args.scalar(0))
    op = ["sum", "max", "min"][args.scalar(1)]
    xs = [args.tensor(i) for i in range(3)]
    comm.reduce_into(args.tensor(3), xs, op = op)
    chip.reduce_into([args.tensor(4), args.tensor(5)], xs, op = op)
    if comm.rank == 0:
        print("short:", catch(lambda: comm.reduce_into(args.tensor(3).view(shape = [N - 1]), xs)))
        print("empty:", catch(lambda: chip.reduce_into(args.tensor(3), [])))
        print("op:", catch(lambda: chip.reduce_into(args.tensor(3), xs, op = "prod")))
        print("not a list:", catch(lambda: chip.reduce_into(args.tensor(3), xs[0])))

def main(ctx):
    w = Worker(level = 3, device_ids = [0, 1])
    w.register(kernel)
    w.init()
    xs = [host_tensor(data = (array.arange(N, FLOAT32) * float(k + 1) - 3000.0) * (1.0 if k != 1 else -1.0)) for k in range(3)]
    a = [x.read().tolist() for x in xs]
    wants = {
        0: [p + q + r for p, q, r in zip(a[0], a[1], a[2])],
        1: [max(p, q, r) for p, q, r in zip(a[0], a[1], a[2])],
        2: [min(p, q, r) for p, q, r in zip(a[0], a[1], a[2])],
    }
    for opi in range(3):
        outs = [[host_tensor(shape = [N]) for _ in range(3)] for _ in range(2)]
        def orch(o, args, cfg):
            h = o.allocate_domain(name = "r", workers = [0, 1], window_size = 64)
            ms = [TaskArgs(tensors = [(x, INPUT) for x in xs] + [(y, OUTPUT) for y in outs[r]],
                           scalars = [h[r].device_ctx, opi]) for r in range(2)]
            o.submit_next_level_group(kernel, ms, workers = [0, 1])
            h.release()
        w.run(orch)
        for r in range(2):
            for y in outs[r]:
                assert.eq(y.read().tolist(), wants[opi])
    print("reduce_into: ok")
    w.close()
`

func TestReduceIntoInAKernel(t *testing.T) {
	out, err := runScript(t, map[string]string{"main.star": reduceIntoScript})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		"short: ValueError: comm.reduce_into: 4099 float32 elements into a tensor of 4098 float32",
		"empty: ValueError: chip.reduce_into: tensors is empty",
		`op: ValueError: chip.reduce_into: op must be "sum", "max" or "min", got "prod"`,
		"not a list: TypeError: chip.reduce_into: tensors must be a list of Tensors, got Tensor",
		"reduce_into: ok",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
