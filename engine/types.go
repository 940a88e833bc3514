package engine

import (
	"fmt"
	"strings"
	"time"

	"simpler/hal"
	"simpler/hal/dtype"
	"simpler/internal/race"
	"simpler/wire"
)

// Tag says how a task uses a tensor; dependencies are inferred from it
// (Reads, Writes; Needs is the access it needs of a remote buffer). It is
// wire.Tag, so the values a task carries across a process or a host are
// the engine's by construction.
type Tag = wire.Tag

// The tensor tags.
const (
	Input          = wire.TagInput          // waits for the last writer
	Output         = wire.TagOutput         // becomes the writer
	InOut          = wire.TagInOut          // waits for the last writer, then becomes it
	OutputExisting = wire.TagOutputExisting // becomes the writer of memory that already exists
	NoDep          = wire.TagNoDep          // neither waits nor writes for dependency purposes
)

// Tags lists every tag in order.
var Tags = []Tag{Input, Output, InOut, OutputExisting, NoDep}

// Tensor names memory: a host address in shared memory, or a device
// address of the chip a task runs on (ChildMemory). A tensor of a remote
// node's task lies elsewhere, which its TaskArgs' Remote says.
type Tensor struct {
	Addr  uint64
	Shape []int
	// Strides, in elements, lays a strided view out (args.go); nil is
	// row-major, contiguous.
	Strides     []int
	DType       dtype.DType
	ChildMemory bool
}

func (t Tensor) String() string {
	where := fmt.Sprintf("host 0x%x", t.Addr)
	if t.ChildMemory {
		where = fmt.Sprintf("device 0x%x", t.Addr)
	}
	return t.describe(where)
}

// describe shows t as lying at where.
func (t Tensor) describe(where string) string {
	dims := make([]string, len(t.Shape))
	for i, d := range t.Shape {
		dims[i] = fmt.Sprint(d)
	}
	if t.Strides != nil {
		st := make([]string, len(t.Strides))
		for i, s := range t.Strides {
			st[i] = fmt.Sprint(s)
		}
		return fmt.Sprintf("Tensor(%s, shape=(%s), strides=(%s), %s)", where, strings.Join(dims, ", "), strings.Join(st, ", "), t.DType)
	}
	return fmt.Sprintf("Tensor(%s, shape=(%s), %s)", where, strings.Join(dims, ", "), t.DType)
}

// TaskArgs are a task's tensors (each with a tag) followed by its scalars.
type TaskArgs struct {
	Tensors []Tensor
	Tags    []Tag
	Scalars []uint64
	// Remote is, for a remote node's task, where each tensor's bytes are
	// there (Remote[i] for Tensors[i], AddRemote); nil for any other
	// task, so a local submit never looks further.
	Remote []RemoteRef
}

// AddRemote appends a tensor that lies where ref says, for a remote node;
// t gives its shape and dtype.
func (a *TaskArgs) AddRemote(t Tensor, ref RemoteRef, tag Tag) error {
	if err := a.AddTensor(t, tag); err != nil {
		return err
	}
	if a.Remote == nil {
		a.Remote = make([]RemoteRef, len(a.Tensors))
	}
	a.Remote[len(a.Remote)-1] = ref
	return nil
}

// AddTensor appends a tensor; tensors must come before scalars.
func (a *TaskArgs) AddTensor(t Tensor, tag Tag) error {
	if len(a.Scalars) > 0 {
		return Errorf(ValueError, "add_tensor: tensors must precede scalars (this TaskArgs already has %d scalar(s))", len(a.Scalars))
	}
	if !tag.Valid() {
		return Errorf(ValueError, "add_tensor: unknown tag %d", uint8(tag))
	}
	a.Tensors = append(a.Tensors, t)
	a.Tags = append(a.Tags, tag)
	if a.Remote != nil {
		a.Remote = append(a.Remote, RemoteRef{})
	}
	return nil
}

// AddScalar appends a 64-bit scalar.
func (a *TaskArgs) AddScalar(v uint64) { a.Scalars = append(a.Scalars, v) }

// CallConfig carries per-call settings.
type CallConfig struct {
	BlockDim        int  // cores a kernel is launched on
	AicpuThreadNum  int  // AICPU scheduler threads
	EnableProfiling bool // collect per-task timing
	// Timeout is the task's deadline, from when it starts on its endpoint;
	// 0 means the Worker's TaskTimeout (none by default). A task past it
	// fails with a TimeoutError and is asked to stop.
	Timeout time.Duration
}

// Wire is the part of c that crosses to where the task runs (a deadline
// is kept by the side that started the task).
func (c CallConfig) Wire() wire.CallConfig {
	return wire.CallConfig{BlockDim: c.BlockDim, AicpuThreadNum: c.AicpuThreadNum, EnableProfiling: c.EnableProfiling}
}

// CallConfigOf is the CallConfig a task received from its parent (over a
// mailbox or a remote session's TASK).
func CallConfigOf(w wire.CallConfig) CallConfig {
	return CallConfig{BlockDim: w.BlockDim, AicpuThreadNum: w.AicpuThreadNum, EnableProfiling: w.EnableProfiling}
}

// ConfigKeys lists the CallConfig keys scripts may set.
var ConfigKeys = []string{"block_dim", "aicpu_thread_num", "enable_profiling", "timeout_s"}

// DefaultCallConfig is what a nil config means.
var DefaultCallConfig = CallConfig{BlockDim: 1, AicpuThreadNum: 1}

// Callable is something a task runs, identified by a digest that is the
// same in every process that loads the same code.
type Callable interface {
	Name() string
	Digest() string
}

// Locatable is a callable that can say where another process finds it
// (a child process, a remote session): the module (relative to the
// bundle) and the top-level name.
type Locatable interface {
	Callable
	Module() string
}

// Resolver finds registered callables in another process (a child
// process, a remote session): the binding loads the module bundle the
// parent sent and checks the digest.
type Resolver interface {
	Resolve(digest, module, name string) (Callable, error)
}

// maxBytes bounds a tensor's bytes, a size or an offset: no host object
// or device allocation is larger. maxArgs (tensors, and scalars) and
// maxDims bound a task's args as every message that carries a task does,
// so what runs in one mode is refused in none.
const (
	maxBytes = wire.MaxBufferBytes
	maxArgs  = wire.MaxTensors // = wire.MaxScalars
	maxDims  = wire.MaxDims
)

// ChipCtx is what a kernel sees of the chip it runs on.
type ChipCtx struct {
	WorkerID int
	Chip     hal.Chip
	// Local is the endpoint's own slot for the binding (a Starlark thread,
	// say), reused across the tasks of one endpoint.
	Local any
	// Stop is how the engine asks the running kernel to stop; a kernel
	// that can stop registers how with Stop.OnStop. Nil: nothing asks.
	Stop *Stopper
	// Race is the race detector's context of the running kernel (nil:
	// --race is off).
	Race *race.Ctx

	// dev and mapped are RunChipKernel's per-task scratch, kept here so
	// that an endpoint's tasks reuse them: the device view of a task's
	// args (valid while its kernel runs), and the windows mapped for it.
	// So a ChipCtx runs one kernel at a time, as an endpoint does.
	dev    TaskArgs
	mapped []uint64
}

// SubCtx is what a SUB callable sees of its worker.
type SubCtx struct {
	WorkerID int
	Local    any
	Stop     *Stopper  // as ChipCtx.Stop
	Race     *race.Ctx // as ChipCtx.Race
}

// ChipKernel runs on a chip: NEXT_LEVEL tasks of an L3 worker.
type ChipKernel interface {
	Callable
	RunChip(c *ChipCtx, args *TaskArgs) error
}

// SubCallable runs on a SUB worker with host tensors.
type SubCallable interface {
	Callable
	RunSub(c *SubCtx, args *TaskArgs) error
}

// OrchCallable is an orchestration function a parent submits to an L3 (or
// deeper) child worker.
type OrchCallable interface {
	Callable
	RunOrch(o *Orchestrator, args *TaskArgs, cfg *CallConfig) error
}
