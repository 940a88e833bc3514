package engine

import (
	"fmt"

	"simpler/engine/hostmem"
	"simpler/hal"
)

// RunChipKernel runs a chip kernel on ctx.Chip, a chip of this process
// (a thread-mode endpoint's, or a chip process's own: engine/proc). The
// kernel sees device tensors only: a host tensor argument is mapped into
// the chip's address space for the task (the simulator's unified memory:
// no copy, and the kernel's stores land in the host tensor), and device
// tensors (child_memory) pass through untouched.
func RunChipKernel(ctx *ChipCtx, k ChipKernel, args *TaskArgs) error {
	if len(args.Tensors) == 0 {
		return k.RunChip(ctx, args)
	}
	chip := ctx.Chip
	dev := &ctx.dev
	dev.Tensors = append(dev.Tensors[:0], args.Tensors...)
	dev.Tags, dev.Scalars = args.Tags, args.Scalars
	defer func() {
		for _, p := range ctx.mapped {
			chip.UnmapWindow(p)
		}
		ctx.mapped = ctx.mapped[:0]
		clear(dev.Tensors) // no host tensor stays reachable from the endpoint
		*dev = TaskArgs{Tensors: dev.Tensors[:0]}
	}()
	for i, t := range args.Tensors {
		if t.ChildMemory {
			continue
		}
		nbytes, ok := t.Span() // a strided view maps every byte it reaches
		if !ok {
			return Errorf(ValueError, "tensor %d: shape %v of %s exceeds %d bytes", i, t.Shape, t.DType, maxBytes)
		}
		host, err := hostmem.Resolve(t.Addr, nbytes)
		if err != nil {
			return Wrap(err, fmt.Sprintf("tensor %d", i))
		}
		if len(host) == 0 {
			continue // an empty tensor has nothing to map
		}
		p, err := chip.MapWindow(host, "host tensor")
		if err != nil {
			return Wrap(err, fmt.Sprintf("mapping tensor %d", i))
		}
		ctx.mapped = append(ctx.mapped, p)
		dev.Tensors[i].Addr, dev.Tensors[i].ChildMemory = p, true
	}
	return k.RunChip(ctx, dev)
}

// Devices is a Worker's device memory and its level-2 kernel runs: the
// chips reached outside the task queue. It is a view of the Worker, whose
// chips open and close with it, and keeps no state of its own. Every call
// checks the Worker's state under w.mu and talks to the chip (a mailbox
// round trip in process mode) after unlocking it.
type Devices struct{ w *Worker }

// Devices is the worker's device memory.
func (w *Worker) Devices() Devices { return Devices{w} }

// RunKernel runs a kernel synchronously on a level-2 worker's chip.
func (d Devices) RunKernel(h *Handle, args *TaskArgs) error {
	w := d.w
	w.mu.Lock()
	err := w.ready("run")
	if err == nil && w.cfg.Level != 2 {
		err = Errorf(ValueError, "run: a level-%d worker runs orchestration functions; run(kernel, args) is for level 2", w.cfg.Level)
	}
	if err == nil {
		err = w.registered("run", h)
	}
	var c chipSlot
	if err == nil {
		c = w.tree.chips[0]
	}
	w.mu.Unlock()
	if err != nil {
		return err
	}
	if _, ok := h.Callable.(ChipKernel); !ok {
		return Errorf(TypeError, "run: %q cannot run as a chip kernel", h.Name())
	}
	if args == nil {
		args = &TaskArgs{}
	}
	a := args.clone()
	for i, t := range a.Tensors {
		if t.Addr == 0 {
			return Errorf(ValueError, "run: tensor %d has address 0; a level-2 run has no heap, so pass allocated memory", i)
		}
		if t.DType.Size() == 0 { // as submit checks; a child refuses such a tensor too
			return Errorf(ValueError, "run: tensor %d has no dtype", i)
		}
	}
	err = d.observeKernel(h.Name(), func() error { return c.runKernel(h, &a) })
	if err != nil {
		return taskError(1, w.workerName(NextLevel, 0), h.Name(), err)
	}
	return nil
}

// observeKernel runs a level-2 run(kernel, args) and reports it as a run
// of its own with one task on the chip's lane, submitted, started and
// finished like a level-3 task: otherwise a level-2 script's trace and
// progress line would show no task at all.
func (d Devices) observeKernel(callable string, run func() error) error {
	w := d.w
	if !w.events.on() {
		return run()
	}
	w.mu.Lock()
	w.runSeq++
	id := w.runSeq
	w.mu.Unlock()
	lane := w.workerName(NextLevel, 0)
	w.events.emit(Event{Kind: TaskSubmitted, Run: id, Task: 1, Members: 1, Callable: callable})
	w.events.emit(Event{Kind: TaskStarted, Run: id, Task: 1, Worker: lane, Callable: callable})
	err := run()
	w.events.emit(Event{Kind: TaskFinished, Run: id, Task: 1, Worker: lane, Callable: callable, Err: err})
	return err
}

// Malloc reserves device memory on chip `worker`.
// Outside any run, like Free, CopyTo and CopyFrom: refused while a run is
// in flight (direct.go).
func (d Devices) Malloc(worker, size int) (uint64, error) {
	return d.w.DirectIn(nil).Malloc("malloc", worker, size)
}

// Free releases device memory on chip `worker`.
func (d Devices) Free(worker int, ptr uint64) error {
	return d.w.DirectIn(nil).Free("free", worker, ptr)
}

// CopyTo copies host bytes into chip `worker`'s memory at dst.
func (d Devices) CopyTo(worker int, dst uint64, src []byte) error {
	return d.w.DirectIn(nil).CopyTo("copy_to", worker, dst, src)
}

// CopyFrom copies chip `worker`'s memory at src into dst.
func (d Devices) CopyFrom(worker int, dst []byte, src uint64) error {
	return d.w.DirectIn(nil).CopyFrom("copy_from", worker, dst, src)
}

// Memory is the memory of chip id (NEXT_LEVEL worker id at level 3, id
// 0 at level 2), in either mode.
func (d Devices) Memory(id int) (ChipMemory, error) {
	c, err := d.chipFor("chip", id)
	if err != nil {
		return nil, err
	}
	return c.Memory(), nil
}

// Chip is chip id when it is in this process (thread mode), where its
// memory can be read in place; a chip in a process of its own is
// reached through Memory.
func (d Devices) Chip(id int) (hal.Chip, error) {
	c, err := d.chipFor("chip", id)
	if err != nil {
		return nil, err
	}
	if c.here() == nil {
		return nil, Errorf(RuntimeError, "chip: %s is a process of its own; its memory is reached through Memory", d.w.workerName(NextLevel, id))
	}
	return c.here(), nil
}

// LocalChips is a level-3 node's chips, from Init to close.
func (d Devices) LocalChips() []LocalChip {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	cs := make([]LocalChip, len(w.tree.chips))
	for i, c := range w.tree.chips {
		cs[i] = c
	}
	return cs
}

// chipFor is chip id of a ready worker, for op's errors.
func (d Devices) chipFor(op string, id int) (chipSlot, error) {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.ready(op); err != nil {
		return nil, err
	}
	if w.cfg.Level >= 4 { // as at level 3 and upstream: an id outside the (empty) chip list
		return nil, Errorf(IndexError, "%s: worker_id %d out of range (a level-%d worker has no chips of its own; its children do)", op, id, w.cfg.Level)
	}
	if id < 0 || id >= len(w.tree.chips) {
		// An index into the worker's chips: upstream raises IndexError.
		return nil, Errorf(IndexError, "%s: worker_id %d out of range (%s)", op, id, idRange(len(w.tree.chips), "this worker has chips", "this worker has no chips"))
	}
	return w.tree.chips[id], nil
}

// malloc checks size here, before any conversion: a process-mode chip
// gets it through the mailbox as an unsigned bounded value, so a bad size
// must be refused the same way in both modes before it gets there.
func (d Devices) malloc(op string, worker, size int) (uint64, error) {
	c, err := d.chipFor(op, worker)
	if err != nil {
		return 0, err
	}
	if size <= 0 {
		return 0, Errorf(ValueError, "%s: size must be > 0, got %d", op, size)
	}
	platform := d.w.cfg.Platform
	if max := platform.Arch().DeviceMemory; int64(size) > max {
		return 0, Errorf(ValueError, "%s: size %d exceeds the device memory of one %s chip (%d bytes)", op, size, platform.Name(), max)
	}
	p, err := c.Memory().Malloc(size)
	if err == nil {
		d.w.race.nameDevice(worker, p, size)
	}
	return p, Wrap(err, op)
}

func (d Devices) free(op string, worker int, ptr uint64) error {
	c, err := d.chipFor(op, worker)
	if err != nil {
		return err
	}
	d.w.race.forgetDevice(worker, ptr)
	return c.Memory().Free(ptr) // hal names the operation and the pointer
}

func (d Devices) copyTo(op string, worker int, dst uint64, src []byte) error {
	c, err := d.chipFor(op, worker)
	if err != nil {
		return err
	}
	return Wrap(c.Memory().CopyIn(dst, src), op)
}

func (d Devices) copyFrom(op string, worker int, dst []byte, src uint64) error {
	c, err := d.chipFor(op, worker)
	if err != nil {
		return err
	}
	return Wrap(c.Memory().CopyOut(dst, src), op)
}
