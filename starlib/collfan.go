package starlib

import (
	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/hal/dtype"
)

// runFan is _k_fan in Go (see collwindow.go for the contract and
// collective_kernels.star for the algorithm): the same segments through
// the same slots, the same waits and notifies, the same writes in the
// same order.

// Fan modes (ALLGATHER, BROADCAST, ALL_TO_ALL).
const (
	fanAllgather = iota
	fanBroadcast
	fanAllToAll
)

// fanTask is _k_fan's state after its setup.
type fanTask struct {
	*winTask
	mode, root     int
	E, K, segb     int
	m              int // elements per stream
	flags, slotb   int
	producer       bool
	peers, consume []int
	ready, ack     []*Tensor
	seen, acked    []int64
}

// readFan accepts a FAN task the Starlark body would run to the end:
// scalars [device_ctx, mode, root, seg_elems, slots, slot_bytes] in range,
// at least two ranks, sub-slots of at least a segment, a window of
// fan_window(n, mode, slots, slot_bytes) or more, an output of the size
// the mode writes, and for all_to_all an element count divisible by n.
func readFan(th *starlark.Thread, chip *Chip, args *engine.TaskArgs) (*fanTask, bool) {
	sc, ok := windowScalars(args, 6)
	if !ok || sc[1] > fanAllToAll || sc[3] < 1 || sc[4] < 1 {
		return nil, false
	}
	k, ok := readPair(th, chip, args, args.Scalars[0])
	if !ok || k.n < 2 || sc[2] >= k.n || sc[5] < sc[3]*k.isz {
		return nil, false
	}
	f := &fanTask{winTask: k, mode: sc[1], root: sc[2], E: sc[3], K: sc[4], segb: sc[5], m: k.L}
	want := k.L
	switch f.mode {
	case fanAllgather:
		want = k.n * k.L
	case fanAllToAll:
		f.m = k.L / k.n
		if k.L%k.n != 0 {
			return nil, false
		}
	}
	f.flags = (16*k.n + kernelLine - 1) / kernelLine * kernelLine
	f.slotb = f.segb
	if f.mode == fanAllToAll {
		f.slotb = f.segb * k.n
	}
	if k.dst.t.Elems() != want || k.c.v.WindowSize() < f.flags+f.K*f.slotb {
		return nil, false
	}
	return f, true
}

// setup is _k_fan's lists: the signal words, who produces, whom it reads.
func (f *fanTask) setup() {
	n, r := f.n, f.r
	f.ready, f.ack = make([]*Tensor, n), make([]*Tensor, n)
	for j := range n {
		f.ready[j] = f.window(r, 1, 8*j, dtype.Int64)
		f.ack[j] = f.window(r, 1, 8*(n+j), dtype.Int64)
	}
	f.producer = f.mode != fanBroadcast || r == f.root
	for i := 1; i < n; i++ {
		f.peers = append(f.peers, (r+i)%n)
	}
	f.consume = f.peers
	if f.mode == fanBroadcast {
		f.peers = nil
		if r != f.root {
			f.peers = []int{f.root}
		}
	}
	f.seen, f.acked = make([]int64, n), make([]int64, n)
}

// runFan is _k_fan.
func runFan(th *starlark.Thread, chip *Chip, args *engine.TaskArgs) (bool, error) {
	f, ok := readFan(th, chip, args)
	if !ok {
		return false, nil
	}
	f.start()
	f.setup()
	for g := range ceilDiv(f.m, f.E) {
		s0 := g * f.E
		count := min(f.E, f.m-s0)
		slot0 := f.flags + (g%f.K)*f.slotb
		if f.producer {
			if err := f.produce(g, s0, count, slot0); err != nil {
				return true, err
			}
		}
		for _, p := range f.peers {
			if err := f.take(p, g, s0, count, slot0); err != nil {
				return true, err
			}
		}
	}
	return true, nil
}

// produce stores segment g in its slot once every consumer took segment
// g-K, writes this rank's own part of the output, and posts it.
func (f *fanTask) produce(g, s0, count, slot0 int) error {
	need := int64(g - f.K + 1)
	for _, j := range f.consume {
		if need > f.acked[j] {
			got, err := f.c.waitTensor(f.th, f.ack[j], need, ">=", kernelTimeout)
			if err != nil {
				return err
			}
			f.acked[j] = got
		}
	}
	if err := f.store(s0, count, slot0); err != nil {
		return err
	}
	for j := range f.n {
		if j != f.r {
			if err := f.c.notifyTensor(f.th, j, f.ready[f.r], int64(g+1), "set"); err != nil {
				return err
			}
		}
	}
	return nil
}

// store is the producer's writes of one segment: into its slot (a
// sub-slot per destination for all_to_all) and its own part of the
// output.
func (f *fanTask) store(s0, count, slot0 int) error {
	if f.mode == fanAllToAll {
		for _, d := range f.peers {
			if err := f.write(f.window(f.r, count, slot0+d*f.segb, f.dt), f.part(f.src, d*f.m+s0, count)); err != nil {
				return err
			}
		}
		own := f.r*f.m + s0
		return f.write(f.part(f.dst, own, count), f.part(f.src, own, count))
	}
	slot := f.window(f.r, count, slot0, f.dt)
	if err := f.write(slot, f.part(f.src, s0, count)); err != nil {
		return err
	}
	own := 0
	if f.mode == fanAllgather {
		own = f.r * f.m
	}
	return f.write(f.part(f.dst, own+s0, count), slot)
}

// take copies producer p's segment g into the output once p posted it,
// and acknowledges it.
func (f *fanTask) take(p, g, s0, count, slot0 int) error {
	if int64(g+1) > f.seen[p] {
		got, err := f.c.waitTensor(f.th, f.ready[p], int64(g+1), ">=", kernelTimeout)
		if err != nil {
			return err
		}
		f.seen[p] = got
	}
	var theirs *Tensor
	out := s0
	switch f.mode {
	case fanAllToAll:
		theirs, out = f.window(p, count, slot0+f.r*f.segb, f.dt), p*f.m+s0
	case fanAllgather:
		theirs, out = f.window(p, count, slot0, f.dt), p*f.m+s0
	default:
		theirs = f.window(p, count, slot0, f.dt)
	}
	if err := f.write(f.part(f.dst, out, count), theirs); err != nil {
		return err
	}
	return f.c.notifyTensor(f.th, p, f.ack[f.r], int64(g+1), "set")
}

// write is dst.write(src) for a tensor of the same dtype: a copy.
func (f *fanTask) write(dst, src *Tensor) error {
	return copyTensor(f.th, "write", dst, src)
}
