package starlib

import (
	"simpler/engine"
	"simpler/internal/halt"
	"simpler/internal/race"
	"simpler/starlib/inplace"
)

// A ring over many ranks moves segments of an element or a few, and per
// step the tensor machinery (a Tensor and its shape per view, the chip's
// lookup of the view's bytes, the reduction's argument slices) cost more
// than the data. A seg is such a view whose range the kernel already
// proved (readRing), with its bytes sliced from memory resolved once per
// task: the window a View mapped at open (the mapping does not change
// during a task), a host tensor's bytes resolved when the task was
// accepted. Its Tensor is only what --race is told: touch reads its
// address and flags, as it would read those of the view the Starlark
// body makes, and is given the same bytes, so the reported ranges are
// the same.

// seg is one view and its bytes; it is reused from step to step, never
// copied (its Tensor's shape points into it).
type seg struct {
	t     Tensor
	shape [1]int
	b     []byte
}

// set makes s the view of count elements at byte off of like's memory,
// whose bytes are mem (from like's address on).
func (s *seg) set(like *Tensor, mem []byte, off, count, isz int) {
	s.t = *like
	s.t.t.Addr = like.t.Addr + uint64(off)
	s.shape[0] = count
	s.t.t.Shape = s.shape[:]
	s.b = mem[off : off+count*isz : off+count*isz]
}

// winSeg makes s k.window(rank, count, off, k.dt) over the view's mapped
// window.
func (k *winTask) winSeg(s *seg, rank, count, off int) {
	base, _ := k.c.v.Base(rank)
	like := Tensor{t: engine.Tensor{Addr: base, DType: k.dt, ChildMemory: true}, base: base, size: k.c.v.WindowSize(), chip: k.c.chip.ctx.Chip}
	s.set(&like, k.c.v.Window(rank), off, count, k.isz)
}

// partSeg makes s k.part(t, off, count) of a flat tensor whose bytes are
// mem.
func (k *winTask) partSeg(s *seg, t *Tensor, mem []byte, off, count int) {
	s.set(t, mem, off*k.isz, count, k.isz)
}

// segCopy is copyTensor(dst, src) of two segs of one dtype and length:
// the same accesses told to --race (and scheduling points) in the same
// order, then the copy.
func (k *winTask) segCopy(dst, src *seg) {
	const op = "copy_"
	src.t.touch(k.th, src.b, race.Read, op)
	dst.t.touch(k.th, dst.b, race.Write, op)
	copy(dst.b, src.b)
}

// segReduce is reduceTensors over segs of one dtype and length (at most
// two destinations and two sources, as the ring has): every source read
// then every destination written, told to --race in that order, and the
// same reduction.
func (k *winTask) segReduce(o inplace.Op, dsts, srcs []*seg) error {
	const name = "comm.reduce_into"
	var db, sb [2][]byte
	for i, s := range srcs {
		s.t.touch(k.th, s.b, race.Read, name)
		sb[i] = s.b
	}
	for i, d := range dsts {
		d.t.touch(k.th, d.b, race.Write, name)
		db[i] = d.b
	}
	return engine.Wrap(inplace.ReduceStop(k.dt, o, db[:len(dsts)], sb[:len(srcs)], halt.Of(k.th)), name)
}
