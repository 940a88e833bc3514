package starlib

import (
	"simpler/engine"
	"simpler/hal/dtype"
	"simpler/starlib/inplace"
)

// runDirect is collective_kernels.star's _k_direct in Go (see
// collfast.go): the same shares, the same reductions in the same order,
// over the mapped bytes with the loops chip.reduce_into uses. It returns
// false, having touched nothing, for a task it does not accept whole
// (another scalar layout, an index out of range, tensors that disagree):
// the Starlark kernel then runs and words the error.
func runDirect(ctx *engine.ChipCtx, args *engine.TaskArgs) (bool, error) {
	if !nativeOn.Load() {
		return false, nil
	}
	k, ok := readDirect(ctx, args)
	if !ok {
		return false, nil
	}
	nativeKernels.Add(1)
	switch k.mode {
	case modeAllreduce, modeBroadcast:
		return true, k.whole()
	case modeReduceScatter:
		return true, k.reduceScatter()
	case modeAllgather:
		return true, k.allgather()
	}
	k.allToAll()
	return true, nil
}

// directTask is one member's decoded task: every rank's input and output
// bytes and its scalars.
type directTask struct {
	dt          dtype.DType
	op          inplace.Op
	mode, root  int
	part, parts int
	ins, outs   [][]byte
	isz         int
}

// readDirect decodes and checks a direct member's task: scalars
// [device_ctx, mode, op, root, part, parts], n inputs then n outputs, all
// of one dtype, with the element counts of the mode.
func readDirect(ctx *engine.ChipCtx, args *engine.TaskArgs) (*directTask, bool) {
	sc := args.Scalars
	n := len(args.Tensors) / 2
	if len(sc) != 6 || n == 0 || len(args.Tensors) != 2*n {
		return nil, false
	}
	for _, s := range sc[1:] {
		if s > 1<<31 {
			return nil, false
		}
	}
	k := &directTask{mode: int(sc[1]), root: int(sc[3]), part: int(sc[4]), parts: int(sc[5])}
	if k.mode >= numModes || int(sc[2]) >= len(directOps) || k.parts < 1 || k.part >= k.parts {
		return nil, false
	}
	if k.mode == modeBroadcast && k.root >= n {
		return nil, false
	}
	k.op = inplace.Op(sc[2]) // OPS and inplace's ops are in one order: sum, max, min
	k.dt = args.Tensors[0].DType
	k.isz = k.dt.Size()
	if k.isz == 0 {
		return nil, false
	}
	var ok bool
	if k.ins, ok = directBytes(ctx, args.Tensors[:n], k.dt); !ok {
		return nil, false
	}
	if k.outs, ok = directBytes(ctx, args.Tensors[n:], k.dt); !ok {
		return nil, false
	}
	return k, k.sizesAgree()
}

// directBytes resolves tensors of dtype dt whose sizes agree, as
// reduce_into would read them.
func directBytes(ctx *engine.ChipCtx, ts []engine.Tensor, dt dtype.DType) ([][]byte, bool) {
	out := make([][]byte, len(ts))
	for i, et := range ts {
		if et.DType != dt || et.NBytes() != ts[0].NBytes() {
			return nil, false
		}
		b, err := newTensor(et, ctx.Chip).bytes("chip.reduce_into")
		if err != nil {
			return nil, false
		}
		out[i] = b
	}
	return out, true
}

// sizesAgree checks the element counts the mode needs (what the Starlark
// kernel's views would refuse).
func (k *directTask) sizesAgree() bool {
	n := len(k.ins)
	in, out := len(k.ins[0]), len(k.outs[0])
	switch k.mode {
	case modeAllreduce, modeBroadcast:
		return in == out
	case modeReduceScatter:
		return in == n*out
	case modeAllgather:
		return out == n*in
	}
	return in == out && (in/k.isz)%n == 0
}

// elems is elements [start, start+count) of b.
func (k *directTask) elems(b []byte, start, count int) []byte {
	return b[start*k.isz : (start+count)*k.isz]
}

// whole is allreduce and broadcast: chunk `part` of the sources (every
// input, or the root's) into every output; the whole tensors for one
// member.
func (k *directTask) whole() error {
	srcs := k.ins
	if k.mode == modeBroadcast {
		srcs = [][]byte{k.ins[k.root]}
	}
	if k.parts == 1 {
		return reduce(k.dt, k.op, k.outs, srcs)
	}
	start, count := chunk(0, len(k.ins[0])/k.isz, k.parts, k.part)
	if count == 0 {
		return nil
	}
	d := make([][]byte, len(k.outs))
	for i, b := range k.outs {
		d[i] = k.elems(b, start, count)
	}
	s := make([][]byte, len(srcs))
	for i, b := range srcs {
		s[i] = k.elems(b, start, count)
	}
	return reduce(k.dt, k.op, d, s)
}

// reduceScatter: outputs part, part+parts, ...: output j = op over chunk j
// of every input.
func (k *directTask) reduceScatter() error {
	m := len(k.outs[0]) / k.isz
	s := make([][]byte, len(k.ins))
	for j := k.part; j < len(k.outs) && m > 0; j += k.parts {
		for i, b := range k.ins {
			s[i] = k.elems(b, j*m, m)
		}
		if err := reduce(k.dt, k.op, k.outs[j:j+1], s); err != nil {
			return err
		}
	}
	return nil
}

// allgather: inputs part, part+parts, ...: input j into block j of every
// output.
func (k *directTask) allgather() error {
	m := len(k.ins[0]) / k.isz
	d := make([][]byte, len(k.outs))
	for j := k.part; j < len(k.ins) && m > 0; j += k.parts {
		for i, b := range k.outs {
			d[i] = k.elems(b, j*m, m)
		}
		if err := reduce(k.dt, inplace.Sum, d, k.ins[j:j+1]); err != nil {
			return err
		}
	}
	return nil
}

// allToAll: outputs part, part+parts, ...: block r of output d = block d
// of input r, for every r.
func (k *directTask) allToAll() {
	n := len(k.ins)
	m := len(k.ins[0]) / k.isz / n
	for j := k.part; j < n; j += k.parts {
		for r := range n {
			copy(k.elems(k.outs[j], r*m, m), k.elems(k.ins[r], j*m, m))
		}
	}
}

// reduce is chip.reduce_into over bytes already checked (every range one
// length, a whole number of elements), named as there in any error.
func reduce(dt dtype.DType, op inplace.Op, dsts, srcs [][]byte) error {
	return engine.Wrap(inplace.Reduce(dt, op, dsts, srcs), "chip.reduce_into")
}

// chunk is collective_kernels.star's _chunk: chunk c of n of [base,
// base+length), the first length%n chunks one element longer.
func chunk(base, length, n, c int) (int, int) {
	q, rem := length/n, length%n
	extra := 0
	if c < rem {
		extra = 1
	}
	return base + c*q + min(c, rem), q + extra
}
