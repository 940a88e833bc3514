package starlib

import (
	"simpler/engine"
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

// seg is the views of one memory (a window, the input, the output), one
// at a time: it is set up once per task and moved from step to step,
// never copied (its Tensor's shape points into it).
type seg struct {
	t     Tensor
	shape [1]int
	base  uint64 // the memory's address
	mem   []byte // its bytes, from base on
	isz   int
	b     []byte // the current view's
}

// init makes s views of like's memory, whose bytes are mem, in elements
// of isz bytes.
func (s *seg) init(like *Tensor, mem []byte, isz int) {
	s.t = *like
	s.t.t.Shape = s.shape[:]
	s.base, s.mem, s.isz = like.t.Addr, mem, isz
}

// at makes s the view of count elements at byte off of its memory.
func (s *seg) at(off, count int) *seg {
	s.t.t.Addr = s.base + uint64(off)
	s.shape[0] = count
	end := off + count*s.isz
	s.b = s.mem[off:end:end]
	return s
}

// winSeg makes s views of k.window(rank, ...) over the view's mapped
// window, in the kernel's dtype.
func (k *winTask) winSeg(s *seg, rank int) {
	base, _ := k.c.v.Base(rank)
	like := Tensor{t: engine.Tensor{Addr: base, DType: k.dt, ChildMemory: true}, base: base, size: k.c.v.WindowSize(), chip: k.c.chip.ctx.Chip}
	s.init(&like, k.c.v.Window(rank), k.isz)
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
	return engine.Wrap(inplace.ReduceStop(k.dt, o, db[:len(dsts)], sb[:len(srcs)], k.stop), name)
}
