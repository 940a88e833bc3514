package engine

import (
	"fmt"
	"math/bits"
	"slices"

	"simpler/engine/hostmem"
	"simpler/engine/internal/core"
	"simpler/internal/bounds"
)

// A task's arguments: where a tensor's bytes are and how they are laid
// out, and the checks a submit makes of its callable and its arguments
// before it takes w.mu. Nothing here takes a lock or keeps state.

// prepare is what a submit does before it takes w.mu: it checks the
// callable against the workers of job, then every member's arguments,
// before anything is allocated, and makes the heap ring the submit's
// runtime OUTPUTs take blocks from (creating a ring is I/O, which no
// completion should wait behind). heap says whether any does.
func (o *Orchestrator) prepare(op string, h *Handle, job core.Job, argsList []*TaskArgs) (heap bool, err error) {
	if err := o.checkCallable(op, h, job, len(argsList)); err != nil {
		return false, err
	}
	for m, a := range argsList {
		if a == nil {
			continue // no tensors to check; clone makes it empty
		}
		if err := checkArgBounds(op, a); err != nil {
			return false, err
		}
		needs, err := o.checkTensors(op, job, m, a)
		if err != nil {
			return false, err
		}
		heap = heap || needs
	}
	if heap {
		if err := o.ensureRing(); err != nil {
			return false, Wrap(err, op)
		}
	}
	return heap, nil
}

// checkCallable checks that h can run on the workers job names: the
// NEXT_LEVEL worker, each worker of a group (listed once each), or the
// SUB pool.
func (o *Orchestrator) checkCallable(op string, h *Handle, job core.Job, members int) error {
	switch {
	case job.Pool == Sub:
		return o.checkSub(op, h, members)
	case job.Group == nil:
		return o.checkNext(op, h, job.Worker)
	}
	seen := map[int]bool{}
	for _, id := range job.Group {
		if seen[id] {
			return Errorf(ValueError, "%s: worker %d listed twice", op, id)
		}
		seen[id] = true
		if err := o.checkNext(op, h, id); err != nil {
			return err
		}
	}
	return nil
}

func (o *Orchestrator) checkHandle(op string, h *Handle) error {
	if h == nil {
		return Errorf(TypeError, "%s: a callable handle is required", op)
	}
	return nil
}

func (o *Orchestrator) checkNext(op string, h *Handle, worker int) error {
	if err := o.checkHandle(op, h); err != nil {
		return err
	}
	n := o.w.NextCount()
	if worker < 0 || worker >= n {
		return Errorf(ValueError, "%s: worker %d out of range (%s)", op, worker, idRange(n, "NEXT_LEVEL workers are", "this worker has no NEXT_LEVEL workers"))
	}
	if !h.allows(worker) {
		return Errorf(ValueError, "%s: %q is registered for workers %v, not worker %d", op, h.Name(), h.Workers, worker)
	}
	if o.w.cfg.Level == 3 {
		if _, ok := h.Callable.(ChipKernel); !ok {
			return Errorf(TypeError, "%s: %q cannot run as a chip kernel", op, h.Name())
		}
	} else if _, ok := h.Callable.(OrchCallable); !ok {
		return Errorf(TypeError, "%s: %q cannot run as an orchestration function", op, h.Name())
	}
	return nil
}

func (o *Orchestrator) checkSub(op string, h *Handle, n int) error {
	if err := o.checkHandle(op, h); err != nil {
		return err
	}
	if _, ok := h.Callable.(SubCallable); !ok {
		return Errorf(TypeError, "%s: %q cannot run as a SUB callable", op, h.Name())
	}
	if pool := o.w.cfg.NumSubWorkers; n > pool {
		if pool == 0 {
			return Errorf(ValueError, "%s: this worker has no SUB workers (num_sub_workers=0)", op)
		}
		return Errorf(ValueError, "%s: group of %d is larger than the SUB pool (%d workers)", op, n, pool)
	}
	return nil
}

// checkTensors validates every tensor of one member before anything is
// allocated: host tensors must be in shared memory; device tensors must
// lie in a live region of the chip the member runs on; a member bound for
// a remote node, or a tensor that names remote data, is checked as only
// a remote node takes it (checkRemoteTensor), in order, so the first bad
// tensor is the one refused. It also says whether the member has a host
// OUTPUT with no address yet, which takes a block of the run heap: one
// walk of the tensors answers both.
func (o *Orchestrator) checkTensors(op string, job core.Job, m int, a *TaskArgs) (heap bool, err error) {
	worker := job.Worker
	if job.Group != nil {
		worker = job.Group[m]
	}
	remote := job.Pool == NextLevel && o.w.tree.isRemote(worker)
	if remote {
		if err := o.w.tree.nodes[worker].remote().Lost(); err != nil {
			return false, &Error{Kind: RuntimeError, Msg: fmt.Sprintf("%s: remote_worker %d can take no more work: %v", op, worker, err), Cause: err}
		}
	}
	for i, t := range a.Tensors {
		ref := a.ref(i) // none for a local task
		away := remote || !ref.here()
		if err := checkStrided(op, i, t, a.Tags[i], away); err != nil {
			return false, err
		}
		if away {
			if err := checkRemoteTensor(op, i, t, ref, a.Tags[i], worker, remote); err != nil {
				return false, err
			}
			continue
		}
		needs, err := o.checkLocalTensor(op, job, worker, i, t, a.Tags[i])
		if err != nil {
			return false, err
		}
		heap = heap || needs
	}
	if err := checkWriteOverlap(op, a); err != nil {
		return false, err
	}
	return heap, nil
}

// checkLocalTensor checks tensor i of a member that runs on worker of
// job's pool: a host tensor must be in shared memory, a device tensor in
// a live region of the chip the member runs on. It says whether the
// tensor is a host OUTPUT with no address yet, which takes a block of the
// run heap.
func (o *Orchestrator) checkLocalTensor(op string, job core.Job, worker, i int, t Tensor, tag Tag) (heap bool, err error) {
	if t.DType.Size() == 0 {
		return false, Errorf(ValueError, "%s: tensor %d has no dtype", op, i)
	}
	span, ok := t.Span()
	if !ok {
		return false, Errorf(ValueError, "%s: tensor %d: shape %v of %s is more than %d bytes", op, i, t.Shape, t.DType, maxBytes)
	}
	switch {
	case t.Addr == 0 && (tag != Output || t.ChildMemory):
		return false, Errorf(ValueError, "%s: tensor %d has address 0; only a host OUTPUT tensor may leave its address to the runtime", op, i)
	case t.Addr == 0:
		return true, nil
	case !t.ChildMemory:
		if _, err := hostmem.Resolve(t.Addr, span); err != nil {
			return false, Wrap(err, fmt.Sprintf("%s: tensor %d", op, i))
		}
		return false, nil
	case job.Pool == Sub:
		return false, Errorf(ValueError, "%s: tensor %d is device memory (child_memory); SUB workers see host memory only", op, i)
	case o.w.cfg.Level >= 4:
		return false, Errorf(ValueError, "%s: tensor %d is device memory; a level-%d task takes host tensors", op, i, o.w.cfg.Level)
	}
	if err := o.w.tree.chips[worker].Memory().Check(t.Addr, span); err != nil {
		return false, Wrap(err, fmt.Sprintf("%s: tensor %d (child_memory on worker %d)", op, i, worker))
	}
	return false, nil
}

// checkStrided refuses a strided view that cannot be laid out
// (checkLayout), and one bound for a remote node or that is remote data:
// a TASK carries a shape, not strides (a local child's mailbox carries
// both).
func checkStrided(op string, i int, t Tensor, tag Tag, remote bool) error {
	if t.Strides == nil {
		return nil
	}
	if err := checkLayout(op, i, t, tag); err != nil {
		return err
	}
	if remote {
		return Errorf(ValueError, "%s: tensor %d is a strided view; a remote node takes contiguous tensors only", op, i)
	}
	return nil
}

// checkArgBounds applies, in every mode, the bounds a task's args have
// where they must cross a process (maxArgs tensors and scalars, maxDims
// dimensions), so a task a thread-mode worker takes is one a process-mode
// worker takes too, and both refuse it at submit.
func checkArgBounds(op string, a *TaskArgs) error {
	if len(a.Tensors) > maxArgs || len(a.Scalars) > maxArgs {
		return Errorf(ValueError, "%s: %d tensors and %d scalars; a task takes at most %d of each", op, len(a.Tensors), len(a.Scalars), maxArgs)
	}
	for i, t := range a.Tensors {
		if len(t.Shape) > maxDims {
			return Errorf(ValueError, "%s: tensor %d has %d dimensions; at most %d", op, i, len(t.Shape), maxDims)
		}
	}
	return nil
}

// allows reports whether h may run on NEXT_LEVEL worker worker (its
// registration may name the workers it is for).
func (h *Handle) allows(worker int) bool {
	if h.Workers == nil {
		return true
	}
	for _, w := range h.Workers {
		if w == worker {
			return true
		}
	}
	return false
}

// RemoteRef is where the bytes of a tensor of a remote node's task are: a
// place in a remote buffer (a RemoteTensorRef: Buf, and Offset in it) or
// a small input carried in the task frame (host_inline: Inline). The
// zero RemoteRef is neither: the tensor is host or device memory here,
// which a remote node does not take.
type RemoteRef struct {
	Buf    *RemoteBuffer
	Offset int
	Inline []byte
}

// here reports whether ref is the zero RemoteRef: the tensor is memory
// here, not a remote node's.
func (ref RemoteRef) here() bool { return ref.Buf == nil && ref.Inline == nil }

// place is the space of the bytes ref names in a remote buffer, and the
// address of its first byte there: the owner's allocation, buffer and
// generation, with addresses in the owner's allocation, so an owner's and
// an importer's views of a range are one range.
func (ref RemoteRef) place() (core.SpaceKey, uint64) {
	b := ref.Buf
	return core.SpaceKey{Space: remoteSpace, Owner: b.Owner, Buf: b.BufferID, Gen: b.Gen}, uint64(b.Offset + ref.Offset)
}

// ref is where tensor i lies for a remote node (the zero RemoteRef: here).
func (a *TaskArgs) ref(i int) RemoteRef {
	if i >= len(a.Remote) {
		return RemoteRef{}
	}
	return a.Remote[i]
}

// describe shows tensor i as errors show it, where it lies.
func (a *TaskArgs) describe(i int) string {
	t, ref := a.Tensors[i], a.ref(i)
	switch {
	case ref.Buf != nil:
		return t.describe(fmt.Sprintf("remote buffer %d of worker %d at %d", ref.Buf.BufferID, ref.Buf.Owner, ref.Buf.Offset+ref.Offset))
	case ref.Inline != nil:
		return t.describe("inline")
	}
	return t.String()
}

// checkRemoteTensor applies the remote rules: a remote node takes only
// RemoteTensorRef and host_inline tensors, each usable there; a local
// worker takes none.
func checkRemoteTensor(op string, i int, t Tensor, ref RemoteRef, tag Tag, worker int, remote bool) error {
	switch {
	case !remote && !ref.here():
		return Errorf(ValueError, "%s: tensor %d is remote data; worker %d is not a remote node", op, i, worker)
	case ref.Inline != nil:
		if tag != Input {
			return Errorf(ValueError, "%s: tensor %d is host_inline, which is an INPUT, but is tagged %s", op, i, tag)
		}
		if len(ref.Inline) != t.NBytes() {
			return Errorf(ValueError, "%s: tensor %d carries %d inline bytes for %d", op, i, len(ref.Inline), t.NBytes())
		}
		return nil
	case ref.Buf == nil && tag.Writes() && t.Addr == 0:
		return Errorf(ValueError, "%s: tensor %d: a remote OUTPUT needs a RemoteTensorRef (remote_malloc the output first)", op, i)
	case ref.Buf == nil:
		return Errorf(ValueError, "%s: tensor %d is a host tensor; remote worker %d takes RemoteTensorRef tensors (remote_malloc + remote_copy_to, or RemoteTensorRef.host_inline)", op, i, worker)
	}
	b := ref.Buf
	switch {
	case b.Released():
		return UsedAfterRelease(op, fmt.Sprintf("tensor %d's remote buffer", i))
	case b.Worker != worker:
		return Errorf(ValueError, "%s: tensor %d's buffer is usable on worker %d, not worker %d (remote_import it there)", op, i, b.Worker, worker)
	case ref.Offset < 0 || ref.Offset+t.NBytes() > b.NBytes:
		return Errorf(ValueError, "%s: tensor %d (%d bytes at offset %d) overruns its %d-byte buffer", op, i, t.NBytes(), ref.Offset, b.NBytes)
	case tag.Needs()&^b.Access != 0:
		return Errorf(ValueError, "%s: tensor %d is %s, which needs %s access; the handle has %s", op, i, tag, tag.Needs(), b.Access)
	}
	return nil
}

// A tensor's layout. Shape says how many elements each dimension has;
// Strides, when set, says how many elements apart consecutive indices of
// each dimension are (upstream counts strides in elements, not bytes).
// Nil Strides is the row-major layout; Tensor.view stores row-major
// strides as nil (NormalStrides), so a strided view from a script is
// never one contiguous run of bytes, and the contiguous fast paths apply
// to every other tensor.
//
// Span is how far the tensor reaches from Addr: the bytes from its first
// element to one past its last. That is what must lie inside the memory
// behind it; NBytes, the bytes of its elements, is what a kernel reads.

// RowMajor returns the strides of shape laid out row-major.
func RowMajor(shape []int) []int {
	st := make([]int, len(shape))
	n := 1
	for d := len(shape) - 1; d >= 0; d-- {
		st[d] = n
		n *= shape[d]
	}
	return st
}

// NormalStrides returns strides as a Tensor stores them: nil when they
// are row-major for shape (a dimension of one element has no stride that
// matters), else a copy.
func NormalStrides(shape, strides []int) []int {
	if strides == nil {
		return nil
	}
	n := 1
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] != 1 && strides[d] != n {
			return slices.Clone(strides)
		}
		n *= shape[d]
	}
	return nil
}

// Span is the bytes from t's first element to one past its last (0 for a
// tensor of no elements), and false when that is more than maxBytes or a
// stride is negative.
func (t Tensor) Span() (int, bool) {
	if t.Strides == nil {
		return tensorBytes(t)
	}
	if len(t.Strides) != len(t.Shape) {
		return 0, false
	}
	last := uint64(0) // element offset of the last element
	for d, n := range t.Shape {
		s := t.Strides[d]
		switch {
		case n == 0:
			return 0, true
		case n < 0 || s < 0:
			return 0, false
		}
		hi, lo := bits.Mul64(uint64(n-1), uint64(s))
		if hi != 0 || lo > maxBytes {
			return 0, false
		}
		last += lo
		if last > maxBytes {
			return 0, false
		}
	}
	n := (last + 1) * uint64(t.DType.Size())
	if n > maxBytes {
		return 0, false
	}
	return int(n), true
}

// spanBytes is Span for a tensor already checked at submit.
func (t Tensor) spanBytes() int {
	n, _ := t.Span()
	return n
}

// checkLayout refuses, at submit, a tensor whose strides cannot be laid
// out: one per dimension, none negative, a span of at most maxBytes, and
// no zero stride on a dimension of several elements that the task writes
// (every index of it would be the same bytes, written in no order).
func checkLayout(op string, i int, t Tensor, tag Tag) error {
	if t.Strides == nil {
		return nil
	}
	if len(t.Strides) != len(t.Shape) {
		return Errorf(ValueError, "%s: tensor %d has %d strides for %d dimensions", op, i, len(t.Strides), len(t.Shape))
	}
	for d, s := range t.Strides {
		if s < 0 {
			return Errorf(ValueError, "%s: tensor %d: stride %d of dimension %d is negative", op, i, s, d)
		}
		if s == 0 && t.Shape[d] > 1 && tag.Writes() {
			return Errorf(ValueError, "%s: tensor %d is %s but dimension %d (%d elements) has stride 0: its elements would be the same bytes", op, i, tag, d, t.Shape[d])
		}
	}
	if _, ok := t.Span(); !ok {
		return Errorf(ValueError, "%s: tensor %d: shape %v with strides %v of %s reaches more than %d bytes", op, i, t.Shape, t.Strides, t.DType, maxBytes)
	}
	return nil
}

// layoutOf returns the layout of a strided tensor t at addr (which may
// differ from t.Addr for a remote buffer).
func layoutOf(t Tensor, addr uint64) core.Layout {
	es := uint64(t.DType.Size())
	l := core.Layout{Addr: addr, Elem: es}
	for d, n := range t.Shape {
		if n > 1 && t.Strides[d] != 0 { // a zero stride reads the same bytes again
			l.Dims = append(l.Dims, core.Dim{N: uint64(n), Stride: uint64(t.Strides[d]) * es})
		}
	}
	slices.SortStableFunc(l.Dims, func(a, b core.Dim) int {
		switch {
		case a.Stride > b.Stride:
			return -1
		case a.Stride < b.Stride:
			return 1
		}
		return 0
	})
	return l
}

// checkWriteOverlap refuses a task member two of whose tensors write
// overlapping bytes: nothing orders two arguments of one task, so which
// write lands is up to the kernel (upstream refuses them at submit too).
// Reads may overlap anything; an empty tensor writes no bytes; tensors
// the runtime allocates (address 0) are fresh memory.
func checkWriteOverlap(op string, a *TaskArgs) error {
	for i := range a.Tensors {
		if !a.Tags[i].Writes() {
			continue
		}
		for j := i + 1; j < len(a.Tensors); j++ {
			if !a.Tags[j].Writes() {
				continue
			}
			if writesOverlap(a, i, j) {
				return Errorf(ValueError, "%s: tensors %d (%s, %s) and %d (%s, %s) write overlapping bytes; two arguments of one task are not ordered, so give each its own bytes",
					op, i, a.Tags[i], a.describe(i), j, a.Tags[j], a.describe(j))
			}
		}
	}
	return nil
}

// writesOverlap reports whether two checked tensors of one member, i and
// j of a, share a byte of the same memory.
func writesOverlap(a *TaskArgs, i, j int) bool {
	kx, lx, okx := placeOf(a.Tensors[i], a.ref(i))
	ky, ly, oky := placeOf(a.Tensors[j], a.ref(j))
	if !okx || !oky || kx != ky {
		return false
	}
	return core.Overlaps(lx, ly)
}

// placeOf is where a tensor's bytes are, as dependency inference keys
// them (addrOf, or ref's place in a remote buffer; device tensors on the
// member's own chip, since members are never compared), and its layout
// there; false for a tensor with no bytes of its own yet (address 0,
// inline) or none at all.
func placeOf(t Tensor, ref RemoteRef) (core.SpaceKey, core.Layout, bool) {
	if ref.Inline != nil || ref.Buf == nil && t.Addr == 0 {
		return core.SpaceKey{}, core.Layout{}, false
	}
	k, addr := addrOf(t, memberDevice)
	if ref.Buf != nil {
		k, addr = ref.place()
	}
	n := t.spanBytes()
	if n == 0 || t.Elems() == 0 {
		return k, core.Layout{}, false
	}
	if t.Strides == nil {
		return k, core.Layout{Addr: addr, Elem: uint64(n)}, true
	}
	return k, layoutOf(t, addr), true
}

// addrOf is the space of a tensor's bytes and the address of its first
// byte there: host memory, or the device memory of NEXT_LEVEL worker
// device (for a ChildMemory tensor). A remote node's tensors are placed
// by their RemoteRef (place).
func addrOf(t Tensor, device int) (core.SpaceKey, uint64) {
	if t.ChildMemory {
		return core.SpaceKey{Space: device}, t.Addr
	}
	return core.SpaceKey{Space: hostSpace}, t.Addr
}

// Elems is the number of elements.
func (t Tensor) Elems() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// NBytes is the size of the tensor in bytes.
func (t Tensor) NBytes() int { return t.Elems() * t.DType.Size() }

// tensorBytes is t.NBytes() checked: false when a dimension is negative or
// the bytes exceed maxBytes, where NBytes would wrap (a shape of 2^32 by
// 2^32 has 0 bytes by int arithmetic) and a kernel would be handed a
// tensor larger than the memory checked for it.
func tensorBytes(t Tensor) (int, bool) {
	n, ok := bounds.Product(t.Shape, t.DType.Size(), maxBytes)
	return int(n), ok
}
