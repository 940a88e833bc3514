package starlib

import (
	"sort"
	"strings"
)

// DocKind says what a Doc entry describes.
type DocKind uint8

// The kinds of Doc entries.
const (
	DocGlobal DocKind = iota // a predeclared global: "Worker", "host_tensor"
	DocType                  // a value type that is not a global: "Tensor"
	DocMember                // an attribute or method: "Worker.register"
)

// Doc is one entry of the script surface's reference, as `simpler doc`
// prints it. Members are named "Type.member".
type Doc struct {
	Name      string
	Kind      DocKind
	Signature string
	Summary   string // one line
}

// Owner is the type or module a member belongs to ("" for globals and
// types).
func (d Doc) Owner() string {
	if d.Kind != DocMember {
		return ""
	}
	owner, _, _ := strings.Cut(d.Name, ".")
	return owner
}

// Member is the entry's last name component: "register" for
// "Worker.register".
func (d Doc) Member() string {
	if i := strings.LastIndexByte(d.Name, '.'); i >= 0 {
		return d.Name[i+1:]
	}
	return d.Name
}

// DocSections are the headings of the reference in print order: the
// globals, then each type or module whose members are listed. A test
// checks that every section lists every attribute the binding has.
var DocSections = []string{
	"", // globals
	"ctx", "Worker", "CallableHandle", "RunHandle", "Orchestrator",
	"TaskArgs", "CallConfig", "Tensor", "HostBuffer", "Buffer",
	"CommBufferSpec", "CommDomainHandle", "ChipDomainContext",
	"GlobalCommDomainHandle", "Chip", "Comm", "RemoteBufferHandle", "RemoteTensorRef",
	"array", "Array", "DataType", "assert",
	"json", "math", "collectives",
}

// Docs returns every entry once: the globals first, then the sections in
// DocSections order, each headed by its type entry unless that is a
// global already listed.
func Docs() []Doc {
	out := make([]Doc, 0, len(docTable))
	for _, sec := range DocSections {
		for _, d := range Section(sec) {
			if sec != "" && d.Kind == DocGlobal {
				continue
			}
			out = append(out, d)
		}
	}
	return out
}

// Section returns the entries of one section: "" for the globals (in
// table order), else the type's heading entry and its members, sorted by
// name.
func Section(sec string) []Doc {
	var head, members []Doc
	for _, d := range docTable {
		switch {
		case sec == "" && d.Kind == DocGlobal:
			head = append(head, d)
		case sec != "" && d.Kind != DocMember && d.Name == sec:
			head = append(head, d)
		case sec != "" && d.Kind == DocMember && d.Owner() == sec:
			members = append(members, d)
		}
	}
	sort.Slice(members, func(i, j int) bool { return members[i].Name < members[j].Name })
	if sec != "" && len(head) > 1 {
		head = head[:1]
	}
	return append(head, members...)
}

// LookupDoc finds entries by name: an exact entry ("Worker.register",
// "host_tensor"), a section ("Worker": the constructor and every method),
// or a bare member name ("register": every type's member of that name).
func LookupDoc(name string) []Doc {
	for _, sec := range DocSections[1:] {
		if sec == name {
			return Section(sec)
		}
	}
	var out []Doc
	for _, d := range docTable {
		if d.Name == name {
			out = append(out, d)
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, d := range Docs() {
		if d.Kind == DocMember && (d.Member() == name || d.CallName() == name) {
			out = append(out, d)
		}
	}
	return out
}

// CallName is the name a member's signature calls it by, the way a
// script writes it: "w.register" for Worker.register, "o.submit" for
// Orchestrator.submit, "c.allreduce" for collectives.allreduce. It is
// what the reference prints, so `simpler doc` resolves it too.
func (d Doc) CallName() string {
	sig := d.Signature
	if i := strings.IndexAny(sig, "( "); i >= 0 {
		sig = sig[:i]
	}
	return sig
}

// docTable is the reference itself. Keep one line per summary.
var docTable = []Doc{
	// Globals.
	{"Worker", DocGlobal, "Worker(level=3, platform=ctx.platform, device_id=None, device_ids=None, num_sub_workers=0, mode=ctx.mode, enable_sdma=False, heap_ring_size=None, control_timeout_s=None, startup_timeout_s=None, remote_session_timeout_s=None, comm_profile=\"sim\", global_device_ranks=None, task_timeout_s=None, health_timeout_s=None, close_timeout_s=None, order_hazards=False) -> Worker",
		"A node of the worker tree: level 2 is one chip, level 3 owns chips and SUB workers, level 4+ owns child Workers; call only at run time from main() (a RuntimeError inside a kernel, a SUB callable or a child's orchestration function), and never in code shipped to a remote node (a RuntimeError there). order_hazards=True also orders write-after-read and write-after-write between tasks (stricter than upstream, whose OUTPUT and OUTPUT_EXISTING wait for nothing)."},
	{"host_tensor", DocGlobal, "host_tensor(shape=None, dtype=FLOAT32, data=None) -> Tensor",
		"A zero-filled (or data-filled) tensor in shared host memory, visible to every local child; the shape is inferred from data when omitted."},
	{"make_tensor", DocGlobal, "make_tensor(data, shape, dtype, child_memory=False) -> Tensor",
		"A tensor over an explicit address: a device pointer, a window buffer_ptrs entry, or 0 for an OUTPUT the runtime allocates at submit."},
	{"TaskArgs", DocGlobal, "TaskArgs(tensors=[(t, TAG), ...], scalars=[...]) -> TaskArgs",
		"The arguments of one task: tagged tensors, then scalars."},
	{"CallConfig", DocGlobal, "CallConfig(block_dim=1, aicpu_thread_num=1, enable_profiling=False, timeout_s=None) -> CallConfig",
		"Per-call settings passed with a submit; an unknown key is a TypeError."},
	{"CommBufferSpec", DocGlobal, "CommBufferSpec(name, dtype=UINT8, count=None, nbytes=None) -> CommBufferSpec",
		"A named buffer carved from a domain window; give count or nbytes, or both: nbytes may exceed count × itemsize (padding), not fall short of it."},
	{"RemoteTensorRef", DocGlobal, "RemoteTensorRef(handle, offset=0, shape=, dtype=FLOAT32) -> RemoteTensorRef",
		"A tensor inside a remote buffer, for TaskArgs.add_tensor of a task on a remote node."},
	{"catch", DocGlobal, "catch(fn, *args, **kwargs) -> None | string",
		"Calls fn and returns None if it succeeded, else the error message."},
	{"assert", DocGlobal, "assert", "The assertion module: eq, ne, true, fails, allclose (also load(\"@simpler//testing.star\", \"assert\"))."},
	{"array", DocGlobal, "array", "The array module: typed arrays for computing and checking values (zeros, full, arange, from_list, ...)."},
	{"time", DocGlobal, "time", "Starlark's time module (time.now(), time.parse_duration(...), ...), from go.starlark.net/lib/time."},
	{"struct", DocGlobal, "struct(**kwargs) -> struct", "An immutable record with the given fields."},
	{"DataType", DocGlobal, "DataType.FLOAT32, DataType.INT32, ...", "The data types as a namespace; each is also a global."},
	{"TensorArgType", DocGlobal, "TensorArgType.INPUT, TensorArgType.OUTPUT, ...", "The tensor tags as a namespace; each is also a global."},
	{"FLOAT32", DocGlobal, "FLOAT32", "32-bit IEEE float data type."},
	{"FLOAT16", DocGlobal, "FLOAT16", "16-bit IEEE float data type (rounded on store)."},
	{"BFLOAT16", DocGlobal, "BFLOAT16", "bfloat16 data type (rounded on store)."},
	{"INT8", DocGlobal, "INT8", "8-bit signed integer data type."},
	{"INT16", DocGlobal, "INT16", "16-bit signed integer data type."},
	{"INT32", DocGlobal, "INT32", "32-bit signed integer data type."},
	{"INT64", DocGlobal, "INT64", "64-bit signed integer data type."},
	{"UINT8", DocGlobal, "UINT8", "8-bit unsigned integer data type."},
	{"UINT16", DocGlobal, "UINT16", "16-bit unsigned integer data type."},
	{"UINT32", DocGlobal, "UINT32", "32-bit unsigned integer data type."},
	{"UINT64", DocGlobal, "UINT64", "64-bit unsigned integer data type."},
	{"BOOL", DocGlobal, "BOOL", "Boolean data type, one byte per element."},
	{"FLOAT8_E4M3", DocGlobal, "FLOAT8_E4M3", "FP8 (e4m3) data type of the a5 architecture."},
	{"FLOAT8_E5M2", DocGlobal, "FLOAT8_E5M2", "FP8 (e5m2) data type of the a5 architecture."},
	{"FLOAT4_E2M1", DocGlobal, "FLOAT4_E2M1", "FP4 (e2m1) data type of the a5 architecture."},
	{"INPUT", DocGlobal, "INPUT", "Tag: the task reads the tensor; it waits for the tensor's last writer."},
	{"OUTPUT", DocGlobal, "OUTPUT", "Tag: the task writes the tensor and becomes its writer; data == 0 is allocated at submit."},
	{"INOUT", DocGlobal, "INOUT", "Tag: the task reads and writes; it waits for the last writer and becomes the writer."},
	{"OUTPUT_EXISTING", DocGlobal, "OUTPUT_EXISTING", "Tag: the task writes memory that already exists and becomes its writer."},
	{"NO_DEP", DocGlobal, "NO_DEP", "Tag: the tensor is passed without creating or waiting on any dependency."},

	// fmt, json and math: formatting and go.starlark.net's lib/json and lib/math.
	{"fmt", DocGlobal, "fmt(format, *values) -> string", "printf-style formatting with width and precision, which Starlark's % lacks: %[flags][width][.precision]verb, flags among - + space 0, verbs d x X o (int), f e g (number), s (str), r (repr), %% a percent sign; fmt(\"%6.2f|%-4d|\", 3.14159, 7) is \"  3.14|7   |\". A value that does not suit its verb, or too many or too few values, is a TypeError; an unknown verb a ValueError."},
	{"json", DocGlobal, "json", "Starlark's json module (json.encode, json.decode, json.indent, json.encode_indent), from go.starlark.net/lib/json."},
	{"json.encode", DocMember, "json.encode(x) -> string", "x as JSON: None, bools, ints, floats, strings, lists, tuples, dicts with string keys and structs; anything else is an error."},
	{"json.decode", DocMember, "json.decode(s, default=unbound) -> value", "The value of the JSON text s (objects become dicts, arrays lists); an error for bad JSON unless default is given, which is then returned."},
	{"json.indent", DocMember, "json.indent(s, prefix=\"\", indent=\"\\t\") -> string", "The JSON text s re-laid out, one element a line, each line starting with prefix and indented by indent per level."},
	{"json.encode_indent", DocMember, "json.encode_indent(x, prefix=\"\", indent=\"\\t\") -> string", "json.indent(json.encode(x), ...)."},
	{"math", DocGlobal, "math", "Starlark's math module (math.sqrt, math.floor, math.pi, ...), from go.starlark.net/lib/math."},
	{"math.acos", DocMember, "math.acos(x) -> float", "arc cosine of x, in radians."},
	{"math.acosh", DocMember, "math.acosh(x) -> float", "inverse hyperbolic cosine of x."},
	{"math.asin", DocMember, "math.asin(x) -> float", "arc sine of x, in radians."},
	{"math.asinh", DocMember, "math.asinh(x) -> float", "inverse hyperbolic sine of x."},
	{"math.atan", DocMember, "math.atan(x) -> float", "arc tangent of x, in radians."},
	{"math.atan2", DocMember, "math.atan2(y, x) -> float", "arc tangent of y/x, in radians, in the quadrant of (x, y)."},
	{"math.atanh", DocMember, "math.atanh(x) -> float", "inverse hyperbolic tangent of x."},
	{"math.ceil", DocMember, "math.ceil(x) -> int", "the least integer >= x."},
	{"math.copysign", DocMember, "math.copysign(x, y) -> float", "x with the sign of y."},
	{"math.cos", DocMember, "math.cos(x) -> float", "cosine of x radians."},
	{"math.cosh", DocMember, "math.cosh(x) -> float", "hyperbolic cosine of x."},
	{"math.degrees", DocMember, "math.degrees(x) -> float", "x radians in degrees."},
	{"math.e", DocMember, "math.e -> float", "Euler's number, 2.718..."},
	{"math.exp", DocMember, "math.exp(x) -> float", "e to the power x."},
	{"math.fabs", DocMember, "math.fabs(x) -> float", "the absolute value of x, as a float."},
	{"math.floor", DocMember, "math.floor(x) -> int", "the greatest integer <= x."},
	{"math.gamma", DocMember, "math.gamma(x) -> float", "the Gamma function at x."},
	{"math.hypot", DocMember, "math.hypot(x, y) -> float", "sqrt(x*x + y*y), without overflow."},
	{"math.log", DocMember, "math.log(x, base=e) -> float", "the logarithm of x in base."},
	{"math.mod", DocMember, "math.mod(x, y) -> float", "the remainder of x/y, with the sign of x."},
	{"math.pi", DocMember, "math.pi -> float", "3.14159..."},
	{"math.pow", DocMember, "math.pow(x, y) -> float", "x to the power y."},
	{"math.radians", DocMember, "math.radians(x) -> float", "x degrees in radians."},
	{"math.remainder", DocMember, "math.remainder(x, y) -> float", "the IEEE 754 remainder of x/y."},
	{"math.round", DocMember, "math.round(x) -> float", "x rounded to the nearest integer, halves away from zero."},
	{"math.sin", DocMember, "math.sin(x) -> float", "sine of x radians."},
	{"math.sinh", DocMember, "math.sinh(x) -> float", "hyperbolic sine of x."},
	{"math.sqrt", DocMember, "math.sqrt(x) -> float", "the square root of x."},
	{"math.tan", DocMember, "math.tan(x) -> float", "tangent of x radians."},
	{"math.tanh", DocMember, "math.tanh(x) -> float", "hyperbolic tangent of x."},

	// The collectives library, @simpler//collectives.star.
	{"collectives", DocType, "load(\"@simpler//collectives.star\", \"collectives\"); c = collectives(w)",
		"Collective operations over the chips of a level-3 Worker w: collectives(w) registers the library's kernels on w and returns c with allreduce, reduce_scatter, allgather, broadcast, all_to_all and barrier, each called from an orchestration function as c.NAME(o, inputs, outputs, ...). inputs and outputs hold one tensor per rank; workers=None means every chip of w, rank r running on workers[r]. A call checks every argument before it allocates anything (ValueError or TypeError), then submits one group task that reads each input (INPUT) and writes each output (OUTPUT). The auto rule: algo=\"auto\" (every function's default) is direct on a level-3 worker when every tensor is a host tensor (the fewest bytes moved, no domain; a small call is one task), else the function's window algorithm (ring for allreduce and reduce_scatter, fan for the others). S below is one rank's input in bytes, n the number of ranks; moves counts the bytes a rank loads from or stores to a peer's window."},
	{"collectives.global_collectives", DocMember, "global_collectives(w4) -> collectives struct",
		"load(\"@simpler//collectives.star\", \"global_collectives\"): the same functions on a level-4 (or higher) Worker, for ranks on several level-3 nodes, local or remote: workers=[(node, chip), ...] in rank order is required, a rank's tensors are host tensors on a local node and RemoteTensorRefs on a remote one; there is no direct algorithm (ranks share no memory), so auto is the window algorithm over one global domain."},
	{"collectives.allreduce", DocMember, "c.allreduce(o, inputs, outputs, workers=None, op=\"sum\", algo=\"auto\")",
		"Every rank's output = op (sum, max, min) over all ranks' inputs, elementwise; any element count. algo: direct (rank p reduces chunk p of every input straight into chunk p of every output: n*S read and n*S written in all, no window), onephase (stage S in the window, barrier, reduce all n windows: moves (n-1)*S per rank, window S), twophase (stage, barrier, reduce-scatter, barrier, allgather: 2(n-1)/n*S per rank, window S), ring (n-1 reduce-scatter then n-1 allgather steps, pipelined: 2(n-1)/n*S per rank, window 64 + 4 slots of at most 1 MiB), bidirectional_ring (the ring on each half of the data, one each way: the same bytes, half each way, window 64 + 8 slots)."},
	{"collectives.reduce_scatter", DocMember, "c.reduce_scatter(o, inputs, outputs, workers=None, op=\"sum\", algo=\"auto\")",
		"Rank r's output = op over every rank's chunk r of the input; inputs need n x the elements of outputs (else ValueError). algo: direct (output r reduced from chunk r of every input in place: n*S read, S written in all) or ring (the ring's reduce-scatter half: (n-1)/n*S per rank, window 64 + 4 slots of at most 1 MiB)."},
	{"collectives.allgather", DocMember, "c.allgather(o, inputs, outputs, workers=None, algo=\"auto\")",
		"Every rank's output = the inputs of ranks 0..n-1 concatenated; outputs need n x the elements of inputs, any count. algo: direct (each input read once and stored into its block of every output) or fan (each rank streams its input through its window's slots and every other rank copies each segment out: (n-1)*S per rank, window 16n + 4 slots of at most 1 MiB)."},
	{"collectives.broadcast", DocMember, "c.broadcast(o, inputs, outputs, workers=None, root=0, algo=\"auto\")",
		"Every rank's output = the input of rank root (an index into workers); the other inputs are not read but must have the root's shape. algo: direct (the root's input read once, chunk by chunk, stored into every output) or fan (the root streams its input through its window's slots: S per non-root rank, (n-1)*S served by the root, window 16n + 4 slots of at most 1 MiB)."},
	{"collectives.all_to_all", DocMember, "c.all_to_all(o, inputs, outputs, workers=None, algo=\"auto\")",
		"Chunk d of rank r's input (of n equal chunks) lands in chunk r of rank d's output; the element count must divide by n. algo: direct (each block copied once, input to output) or fan (each rank streams one sub-slot per destination: (n-1)/n*S per rank, window 16n + 4 slots of n sub-slots)."},
	{"collectives.barrier", DocMember, "c.barrier(o, workers=None)",
		"A task on every worker that returns once all have arrived (comm.barrier): moves nothing, window 64 bytes. It has no tensors, so a task that must follow it depends on it through tensors of its own."},

	// ctx, what main(ctx) receives.
	{"ctx", DocType, "main(ctx)", "What simpler run passes to a script's main: the command-line choices."},
	{"ctx.platform", DocMember, "ctx.platform -> string", "--platform, else $SIMPLER_PLATFORM, else \"a2a3sim\"."},
	{"ctx.device_ids", DocMember, "ctx.device_ids -> list of int", "--devices (default [0, 1])."},
	{"ctx.mode", DocMember, "ctx.mode -> string", "--mode: \"thread\" (default) or \"process\"."},
	{"ctx.argv", DocMember, "ctx.argv -> list of string", "The arguments after the script name."},

	// Worker.
	{"Worker.register", DocMember, "w.register(fn, workers=None) -> CallableHandle",
		"Registers a top-level function as a chip kernel fn(chip, args), SUB callable fn(args) or child orchestration fn(orch, args, config)."},
	{"Worker.unregister", DocMember, "w.unregister(handle)", "Drops one registration reference; a handle registered on another worker is refused."},
	{"Worker.add_worker", DocMember, "w.add_worker(child) -> int", "Level 4+: adds a local Worker as a NEXT_LEVEL child before init(); returns its worker id."},
	{"Worker.init", DocMember, "w.init()", "Brings the whole tree up (chips, SUB workers, children)."},
	{"Worker.run", DocMember, "w.run(orch_fn, args=None, config=None) -> value",
		"submit(...).wait(), returning orch_fn's result (a RuntimeError inside an orchestration function of the same Worker, whose runs finish in order); at level 2, run(kernel, args) runs a kernel on the chip."},
	{"Worker.submit", DocMember, "w.submit(orch_fn, args=None, config=None) -> RunHandle",
		"Calls orch_fn(orch, args, config) now to build a run's task graph and returns without waiting for the tasks; config reaches orch_fn as it is, except that a CallConfig with timeout_s is a ValueError (a run has no deadline: give it to the tasks)."},
	{"Worker.close", DocMember, "w.close()", "Drains runs, releases every domain and buffer, stops children."},
	{"Worker.malloc", DocMember, "w.malloc(size, worker_id=0) -> int", "Allocates device memory on a chip; returns the device address."},
	{"Worker.free", DocMember, "w.free(ptr, worker_id=0)", "Frees device memory from malloc."},
	{"Worker.copy_to", DocMember, "w.copy_to(dst, src, size, worker_id=0)", "Copies size bytes from a host tensor or address to a device address."},
	{"Worker.copy_from", DocMember, "w.copy_from(dst, src, size, worker_id=0)", "Copies size bytes from a device address to a host tensor or address."},
	{"Worker.create_host_buffer", DocMember, "w.create_host_buffer(nbytes) -> HostBuffer", "A shared host buffer mapped into every local child."},
	{"Worker.free_host_buffer", DocMember, "w.free_host_buffer(buf)", "Frees a HostBuffer; idempotent."},
	{"Worker.create_buffer", DocMember, "w.create_buffer(nbytes, access=\"readwrite\") -> Buffer", "Upstream's Buffer: shared host memory a task may write only if access is \"readwrite\" (\"read\" refuses a write tag at submit)."},
	{"Worker.release_buffer", DocMember, "w.release_buffer(buf)", "Frees a create_buffer Buffer; a RuntimeError while a queued or running task uses it; idempotent."},
	{"Worker.add_remote_worker", DocMember, "w.add_remote_worker(endpoint=\"127.0.0.1:7700\", platform=w.platform, device_ids=[0], num_sub_workers=0, comm_profile=\"sim\", global_device_ranks=None, token=None) -> int",
		"Level 4+: adds a level-3 node served by a `simpler remote-l3-worker` daemon, before init(); returns its worker id."},
	{"Worker.add_worker_group", DocMember, "w.add_worker_group(ranks=, launcher=\"mpirun\", platform=w.platform, device_ids=[0], num_sub_workers=0, hosts=None, launcher_args=[], global_device_ranks=None, listen=\"127.0.0.1:0\", token_file=None) -> list of int",
		"Level 4+: `ranks` remote level-3 nodes that one launcher (mpirun, srun; \"none\": something else) starts at init() and that dial in; returns their worker ids in rank order. launcher_args: allow-listed options only (docs/cluster.md)."},
	{"Worker.remote_malloc", DocMember, "w.remote_malloc(worker=, nbytes=) -> RemoteBufferHandle", "Allocates a buffer on remote node `worker`; returns the owner handle."},
	{"Worker.remote_free", DocMember, "w.remote_free(h)", "Frees an owner buffer (idempotent); the memory goes once no task or import uses it. A free that fails leaves the handle live, to retry."},
	{"Worker.remote_copy_to", DocMember, "w.remote_copy_to(h, host, nbytes, offset=0)", "Copies nbytes from a host tensor or address into the remote buffer at offset."},
	{"Worker.remote_copy_from", DocMember, "w.remote_copy_from(h, host, nbytes, offset=0)", "Copies nbytes of the remote buffer at offset into a host tensor or address."},
	{"Worker.remote_export", DocMember, "w.remote_export(h, offset=0, nbytes=None, access=\"readwrite\") -> RemoteBufferExport", "An opaque grant of a range of an owner buffer, for remote_import on another node."},
	{"Worker.remote_import", DocMember, "w.remote_import(exp, worker=, access=None) -> RemoteBufferHandle", "Makes an exported buffer usable by tasks on node `worker`."},
	{"Worker.remote_release_import", DocMember, "w.remote_release_import(h)", "Drops an imported handle (idempotent); waits for tasks that use it."},
	{"Worker.live_domains", DocMember, "w.live_domains -> dict", "Live (unreleased) communication domains by name."},
	{"Worker.level", DocMember, "w.level -> int", "The worker's level (2 to 6)."},
	{"Worker.platform", DocMember, "w.platform -> string", "The platform name, e.g. \"a2a3sim\"."},
	{"Worker.mode", DocMember, "w.mode -> string", "\"thread\" or \"process\"."},
	{"Worker.device_ids", DocMember, "w.device_ids -> list of int", "The chips' device ids; NEXT_LEVEL worker i is device_ids[i]."},
	{"Worker.num_sub_workers", DocMember, "w.num_sub_workers -> int", "The size of the SUB pool."},

	// CallableHandle.
	{"CallableHandle", DocType, "CallableHandle", "What register returns; accepted wherever a registered function is."},
	{"CallableHandle.hashid", DocMember, "h.hashid -> string", "\"sha256:...\" over the function's module sources: the same in every process."},
	{"CallableHandle.name", DocMember, "h.name -> string", "The function's name."},
	{"CallableHandle.workers", DocMember, "h.workers -> list of int | None", "The NEXT_LEVEL ids it may run on (None: any)."},

	// RemoteBufferHandle.
	{"RemoteBufferHandle", DocType, "RemoteBufferHandle", "A buffer on a remote node, from remote_malloc (owner) or remote_import (imported)."},
	{"RemoteBufferHandle.worker_id", DocMember, "h.worker_id -> int", "The node whose tasks can use this handle."},
	{"RemoteBufferHandle.owner_worker_id", DocMember, "h.owner_worker_id -> int", "The node that holds the memory."},
	{"RemoteBufferHandle.nbytes", DocMember, "h.nbytes -> int", "Its size."},
	{"RemoteBufferHandle.address_space", DocMember, "h.address_space -> string", "\"remote_host\" for an owner handle, \"remote_window\" for an imported one."},
	{"RemoteBufferHandle.access", DocMember, "h.access -> string", "What tasks may do through it: \"read\", \"write\" or \"readwrite\"."},
	{"RemoteBufferHandle.released", DocMember, "h.released -> bool", "Whether it was freed or its import released."},
	{"RemoteBufferHandle.is_imported", DocMember, "h.is_imported -> bool", "Whether it came from remote_import."},

	// RemoteTensorRef.
	{"RemoteTensorRef.host_inline", DocMember, "RemoteTensorRef.host_inline(payload_bytes, shape=, dtype=FLOAT32) -> RemoteTensorRef", "A small INPUT (at most 1 MiB of bytes or an Array) carried inside the task frame."},
	{"RemoteTensorRef.shape", DocMember, "r.shape -> tuple of int", "The shape."},
	{"RemoteTensorRef.dtype", DocMember, "r.dtype -> DataType", "The element type."},
	{"RemoteTensorRef.nbytes", DocMember, "r.nbytes -> int", "The size in bytes."},
	{"RemoteTensorRef.offset", DocMember, "r.offset -> int | None", "The byte offset in its buffer (None for host_inline)."},

	// RunHandle.
	{"RunHandle", DocType, "RunHandle", "A submitted run, returned by w.submit."},
	{"RunHandle.done", DocMember, "r.done -> bool", "Whether the run has passed its fence and cleaned up."},
	{"RunHandle.wait", DocMember, "r.wait(timeout=None)", "Waits for the run; raises the first task failure, or TimeoutError after timeout seconds (0 polls). A negative, inf or nan timeout is a ValueError."},
	{"RunHandle.result", DocMember, "r.result() -> value", "Waits, then returns what the orchestration function returned."},
	{"RunHandle.cancel", DocMember, "r.cancel()", "Ends the run: tasks not started retire without running, running kernels are stopped (a child process that does not stop is killed and started again), and wait() raises RuntimeError: run N cancelled. Idempotent; a finished run is left as it was."},

	// Orchestrator.
	{"Orchestrator", DocType, "def orch(o, args, config)", "The orchestrator an orchestration function receives: it submits tasks and manages a run's memory."},
	{"Orchestrator.submit_next_level", DocMember, "o.submit_next_level(h, args=None, config=None, worker=)", "One task on NEXT_LEVEL worker `worker` (a chip at level 3, a child at level 4+)."},
	{"Orchestrator.submit_next_level_group", DocMember, "o.submit_next_level_group(h, args_list, config=None, workers=)", "One DAG node run on all `workers` at once, member i with args_list[i] (all-or-nothing dispatch)."},
	{"Orchestrator.submit_sub", DocMember, "o.submit_sub(h, args=None)", "One task on the SUB pool: fn(args) on the host."},
	{"Orchestrator.submit_sub_group", DocMember, "o.submit_sub_group(h, args_list)", "One DAG node on several SUB workers at once."},
	{"Orchestrator.scope_begin", DocMember, "o.scope_begin()", "Opens a nested scope: intermediates allocated inside are freed at its end."},
	{"Orchestrator.scope_end", DocMember, "o.scope_end()", "Closes the innermost scope."},
	{"Orchestrator.scope", DocMember, "o.scope(fn, *args, **kwargs) -> value", "Calls fn inside scope_begin()/scope_end(), ending the scope even if fn fails."},
	{"Orchestrator.alloc", DocMember, "o.alloc(shape, dtype=FLOAT32) -> Tensor", "A runtime-managed intermediate host tensor from the run heap: the ring of the current scope depth (4 rings of heap_ring_size bytes), 1024-byte aligned."},
	{"Orchestrator.malloc", DocMember, "o.malloc(worker_id, size) -> int", "Direct control: device memory on a chip (before the run's first submit)."},
	{"Orchestrator.free", DocMember, "o.free(worker_id, ptr) or o.free(buf)", "Direct control: frees device memory (an alloc_child_tensor Buffer frees once; again does nothing)."},
	{"Orchestrator.alloc_child_tensor", DocMember, "o.alloc_child_tensor(worker, shape, dtype=FLOAT32) -> Buffer", "Direct control: device memory for shape x dtype on chip worker, as a Buffer (free with o.free(buf))."},
	{"Orchestrator.copy_to", DocMember, "o.copy_to(worker_id, dst=, src=, size=)", "Direct control: host to device copy."},
	{"Orchestrator.copy_from", DocMember, "o.copy_from(worker_id, dst=, src=, size=)", "Direct control: device to host copy."},
	{"Orchestrator.drain", DocMember, "o.drain()", "Waits for every task submitted so far in this run; raises the first failure."},
	{"Orchestrator.allocate_domain", DocMember, "o.allocate_domain(name=, workers=None, window_size=, buffers=[CommBufferSpec(...)], task_only=False) -> CommDomainHandle",
		"A communication domain over some chips, freed after the run's fence if not released before."},
	{"Orchestrator.release_domain", DocMember, "o.release_domain(h)", "Same as h.release()."},
	{"Orchestrator.allocate_global_domain", DocMember, "o.allocate_global_domain(name=, members=[(node, local_worker), ...], window_size=, buffers=[...], retain_after_run=False) -> GlobalCommDomainHandle",
		"Level 4+: a domain across level-3 nodes (thread- or process-mode local ones, remote ones), brought up node by node (prepare, import, commit) and rolled back on any failure. Its name must not be that of a live global domain of this worker."},
	{"Orchestrator.release_global_domain", DocMember, "o.release_global_domain(h)", "Same as h.release()."},
	{"Orchestrator.get_global_domain", DocMember, "o.get_global_domain(domain_id) -> view", "On a level-3 node: the committed view; view[local_worker_id] is a ChipDomainContext."},
	{"Orchestrator.copy_to_global_domain", DocMember, "o.copy_to_global_domain(h, domain_rank, data, buffer=None, offset=0)", "Level 4: stages bytes or an array into a member's window (at most 8 MiB a call)."},
	{"Orchestrator.copy_from_global_domain", DocMember, "o.copy_from_global_domain(h, domain_rank, nbytes, buffer=None, offset=0) -> bytes", "Level 4: reads bytes out of a member's window (at most 8 MiB a call)."},

	// TaskArgs.
	{"TaskArgs.add_tensor", DocMember, "a.add_tensor(t, tag=INPUT)", "Appends a tagged tensor (tensors must precede scalars)."},
	{"TaskArgs.add_scalar", DocMember, "a.add_scalar(v)", "Appends a scalar: an int as u64, a float as float32 bits."},
	{"TaskArgs.tensor", DocMember, "a.tensor(i) -> Tensor", "Tensor i (inside a kernel: over device memory)."},
	{"TaskArgs.scalar", DocMember, "a.scalar(i) -> int", "Scalar i as an unsigned integer."},
	{"TaskArgs.scalar_f32", DocMember, "a.scalar_f32(i) -> float", "Scalar i read as float32 bits."},
	{"TaskArgs.tag", DocMember, "a.tag(i) -> TensorArgType", "The tag of tensor i."},
	{"TaskArgs.tensor_count", DocMember, "a.tensor_count() -> int", "The number of tensors."},
	{"TaskArgs.scalar_count", DocMember, "a.scalar_count() -> int", "The number of scalars."},
	{"TaskArgs.set_tag", DocMember, "a.set_tag(i, tag)", "Changes the tag of tensor i (IndexError out of range); a Buffer's access is judged at submit."},
	{"TaskArgs.clear", DocMember, "a.clear()", "Removes every tensor and scalar; len(a) counts tensors plus scalars."},

	// CallConfig.
	{"CallConfig.block_dim", DocMember, "c.block_dim -> int", "Cores per task on the device."},
	{"CallConfig.aicpu_thread_num", DocMember, "c.aicpu_thread_num -> int", "AICPU scheduler threads per task."},
	{"CallConfig.enable_profiling", DocMember, "c.enable_profiling -> bool", "Ask the device runtime for a profile."},
	{"CallConfig.timeout_s", DocMember, "c.timeout_s -> float or None", "The task's deadline from when it starts; past it the task fails with TimeoutError (naming worker, callable and deadline), its consumers are poisoned and the kernel is stopped. None: the Worker's task_timeout_s."},

	// Tensor.
	{"Tensor", DocType, "Tensor", "A view over memory (host, or a chip's device memory when child_memory)."},
	{"Tensor.data", DocMember, "t.data -> int", "The start address."},
	{"Tensor.shape", DocMember, "t.shape -> tuple of int", "The shape."},
	{"Tensor.dtype", DocMember, "t.dtype -> DataType", "The element type."},
	{"Tensor.nbytes", DocMember, "t.nbytes -> int", "The size in bytes."},
	{"Tensor.ndims", DocMember, "t.ndims -> int", "The number of dimensions."},
	{"Tensor.child_memory", DocMember, "t.child_memory -> bool", "Whether the address is a chip's device address."},
	{"Tensor.read", DocMember, "t.read() -> Array", "A copy of the contents."},
	{"Tensor.write", DocMember, "t.write(x)", "Writes an Array, list or number into the tensor."},
	{"Tensor.fill", DocMember, "t.fill(v)", "Sets every element to v."},
	{"Tensor.tolist", DocMember, "t.tolist() -> list", "The contents as (nested) lists."},
	{"Tensor.strides", DocMember, "t.strides -> tuple of int", "Elements between consecutive indices of each dimension (row-major unless a view set them)."},
	{"Tensor.view", DocMember, "t.view(shape=None, strides=None, offset=0, dtype=None) -> Tensor", "Another view of the same memory at a byte offset, strides in elements (none negative); every byte it reaches must lie inside the backing. Dependencies intersect strided views per dimension; a written dimension of several elements needs a stride. In-place ops (copy_, add_, ...) take contiguous tensors; read and write take strided ones."},
	{"Tensor.as_atomic", DocMember, "t.as_atomic() -> Tensor", "The same memory; under --race its accesses are checked as atomic ones, the documented way to say a concurrent access is meant (a flag polled in a loop): atomic accesses never race with each other, and still race with plain ones. NO_DEP does not silence a race; this does. Nothing changes without --race (docs/race.md)."},
	{"Tensor.free", DocMember, "t.free()", "Gives a host_tensor's memory back now; later use of it, or of a view of it, is a RuntimeError. Refused while a run in flight uses it. An unreferenced host tensor is reclaimed without it."},
	{"Tensor.accumulate", DocMember, "t.accumulate(src, op=\"sum\")", "Elementwise t = op(t, src) for a tensor src of the same dtype and size (op: sum, max, min); t.add_, t.max_, t.min_ by name."},
	{"Tensor.copy_", DocMember, "t.copy_(u)", "Copies u's bytes into t in place (same dtype and element count, else ValueError)."},
	{"Tensor.add_", DocMember, "t.add_(u)", "t = t + u elementwise over the memory, no copies (same dtype and element count, else ValueError); integers wrap, float16/bfloat16 round."},
	{"Tensor.max_", DocMember, "t.max_(u)", "t = max(t, u) elementwise in place (NaN wins); same dtype and element count."},
	{"Tensor.min_", DocMember, "t.min_(u)", "t = min(t, u) elementwise in place (NaN wins); same dtype and element count."},

	// HostBuffer.
	{"HostBuffer", DocType, "HostBuffer", "A born-shared host buffer from w.create_host_buffer."},
	{"HostBuffer.token", DocMember, "b.token -> int", "The buffer's identity within its Worker."},
	{"HostBuffer.data_ptr", DocMember, "b.data_ptr -> int", "The host address of its first byte."},
	{"HostBuffer.nbytes", DocMember, "b.nbytes -> int", "Its size."},
	{"HostBuffer.tensor", DocMember, "b.tensor(shape, dtype=FLOAT32, offset=0) -> Tensor", "A view of the buffer; one that overruns it is a ValueError."},

	// Buffer.
	{"Buffer", DocType, "Buffer", "Upstream's buffer: host memory from w.create_buffer, or a chip's device memory from o.alloc_child_tensor."},
	{"Buffer.nbytes", DocMember, "b.nbytes -> int", "Its size."},
	{"Buffer.access", DocMember, "b.access -> str", "\"read\" or \"readwrite\": what a task may do with its views."},
	{"Buffer.released", DocMember, "b.released -> bool", "True once released (host) or freed (device); its views are then refused."},
	{"Buffer.child_memory", DocMember, "b.child_memory -> bool", "True for device memory from alloc_child_tensor."},
	{"Buffer.worker_id", DocMember, "b.worker_id -> int or None", "The chip of device memory; None for host memory."},
	{"Buffer.tensor", DocMember, "b.tensor(shape, dtype=FLOAT32, strides=None, byte_offset=0) -> Tensor", "A view (strides in elements; byte_offset a multiple of the dtype size); one that leaves the buffer is a ValueError."},

	// CommBufferSpec.
	{"CommBufferSpec.name", DocMember, "s.name -> string", "The buffer's name."},
	{"CommBufferSpec.dtype", DocMember, "s.dtype -> DataType", "The element type."},
	{"CommBufferSpec.count", DocMember, "s.count -> int", "Elements."},
	{"CommBufferSpec.nbytes", DocMember, "s.nbytes -> int", "Bytes."},

	// GlobalCommDomainHandle.
	{"GlobalCommDomainHandle", DocType, "GlobalCommDomainHandle", "A domain across level-3 nodes, from allocate_global_domain (level 4 and up)."},
	{"GlobalCommDomainHandle.name", DocMember, "h.name -> string", "The domain's name."},
	{"GlobalCommDomainHandle.domain_id", DocMember, "h.domain_id -> int", "The id nodes know it by: pass it to a node orchestration for get_global_domain."},
	{"GlobalCommDomainHandle.generation", DocMember, "h.generation -> int", "The attempt of this id the nodes committed."},
	{"GlobalCommDomainHandle.members", DocMember, "h.members -> list of (node, local_worker)", "The members in domain-rank order."},
	{"GlobalCommDomainHandle.member", DocMember, "h.member(rank) -> (node, local_worker)", "Where domain rank `rank` lives."},
	{"GlobalCommDomainHandle.global_device_ranks", DocMember, "h.global_device_ranks -> list of int", "Each rank's global device rank: its node's global_device_ranks where given; the chips of other nodes take, in node order, the smallest ranks no node gave explicitly."},
	{"GlobalCommDomainHandle.topology_hash", DocMember, "h.topology_hash -> string", "\"sha256:...\" over the broker's cluster id, the profile and every rank's node, local worker and global device rank; the same placement by the same worker gives the same hash."},
	{"GlobalCommDomainHandle.mapping_size", DocMember, "h.mapping_size -> int", "Bytes of each member's window."},
	{"GlobalCommDomainHandle.buffer_range", DocMember, "h.buffer_range(name) -> (offset, nbytes)", "Where a named buffer lies in every member's window. RuntimeError once the handle is released (like member() and staging)."},
	{"GlobalCommDomainHandle.retain_after_run", DocMember, "h.retain_after_run -> bool", "Whether the domain outlives its run's fence (release it yourself)."},
	{"GlobalCommDomainHandle.release", DocMember, "h.release()", "Lets the domain go: freed at its run's fence, or at once if that run is over; a failed release can be retried."},
	{"GlobalCommDomainHandle.released", DocMember, "h.released -> bool", "Whether release() was called. A release whose free failed stays released (the free is tried again by a later release or by close)."},
	{"GlobalCommDomainHandle.freed", DocMember, "h.freed -> bool", "Whether every node has released its windows."},

	// CommDomainHandle.
	{"CommDomainHandle", DocType, "CommDomainHandle", "A domain from allocate_domain; h[worker_id] is that member's ChipDomainContext."},
	{"CommDomainHandle.name", DocMember, "h.name -> string", "The domain's name (unique among live domains)."},
	{"CommDomainHandle.workers", DocMember, "h.workers -> list of int", "Member chips in rank order."},
	{"CommDomainHandle.allocation_id", DocMember, "h.allocation_id -> int", "Fresh for every allocation."},
	{"CommDomainHandle.released", DocMember, "h.released -> bool", "Whether release() was called (or the domain was swept at its run's fence)."},
	{"CommDomainHandle.freed", DocMember, "h.freed -> bool", "Whether the backend windows are gone (after the run's fence)."},
	{"CommDomainHandle.release", DocMember, "h.release()", "Marks the domain released now; it is freed after its run's fence (idempotent)."},

	// ChipDomainContext.
	{"ChipDomainContext", DocType, "ChipDomainContext", "One member's view of a domain: h[worker_id]."},
	{"ChipDomainContext.name", DocMember, "c.name -> string", "The domain's name."},
	{"ChipDomainContext.domain_rank", DocMember, "c.domain_rank -> int", "This member's rank."},
	{"ChipDomainContext.domain_size", DocMember, "c.domain_size -> int", "The number of ranks."},
	{"ChipDomainContext.device_ctx", DocMember, "c.device_ctx -> int", "The handle a kernel passes to chip.comm() (send it as a scalar)."},
	{"ChipDomainContext.local_window_base", DocMember, "c.local_window_base -> int", "This rank's window base (a device address)."},
	{"ChipDomainContext.actual_window_size", DocMember, "c.actual_window_size -> int", "The window size in bytes."},
	{"ChipDomainContext.buffer_ptrs", DocMember, "c.buffer_ptrs -> dict", "Buffer name to device address."},
	{"ChipDomainContext.buffer", DocMember, "c.buffer(name, shape=None, dtype=None) -> Tensor", "A child_memory tensor over a named buffer."},

	// Chip.
	{"Chip", DocType, "def kernel(chip, args)", "What a chip kernel's first parameter is."},
	{"Chip.device_id", DocMember, "chip.device_id -> int", "The device id."},
	{"Chip.worker_id", DocMember, "chip.worker_id -> int", "The NEXT_LEVEL worker id of this chip."},
	{"Chip.platform", DocMember, "chip.platform -> string", "The platform name."},
	{"Chip.comm", DocMember, "chip.comm(device_ctx) -> Comm", "Opens the domain whose device_ctx the kernel received."},
	{"Chip.reduce_into", DocMember, "chip.reduce_into(dst, tensors, op=\"sum\")", "comm.reduce_into without a domain: dst (a Tensor or a list) = op over tensors, each source read once."},

	// Comm.
	{"Comm", DocType, "Comm", "A kernel's view of a domain, from chip.comm(device_ctx)."},
	{"Comm.rank", DocMember, "comm.rank -> int", "This kernel's rank."},
	{"Comm.size", DocMember, "comm.size -> int", "The number of ranks."},
	{"Comm.window_size", DocMember, "comm.window_size -> int", "Bytes per window."},
	{"Comm.window", DocMember, "comm.window(rank) -> Tensor", "A UINT8 tensor over rank's whole window."},
	{"Comm.peer", DocMember, "comm.peer(t, rank) -> Tensor", "The tensor at t's window offset in rank's window (remote load/store)."},
	{"Comm.notify", DocMember, "comm.notify(rank, t, value, op=\"set\")", "Stores (or adds) a signal into rank's window at t's offset; t is INT32 or INT64."},
	{"Comm.wait", DocMember, "comm.wait(t, value, cmp=\">=\", timeout_s=30) -> int", "Waits until the local signal t compares true with value; returns the value seen. Ends early when the task is stopped (deadline, cancel, close)."},
	{"Comm.barrier", DocMember, "comm.barrier(timeout_s=30)", "Waits for every rank of the domain; ends early when the task is stopped (deadline, cancel, close)."},
	{"Comm.reduce_into", DocMember, "comm.reduce_into(dst, tensors, op=\"sum\")", "dst = tensors[0] op tensors[1] op ... in place, each source read once and dst written once; dst may be a list of tensors (each gets the result)."},

	// array module.
	{"array.zeros", DocMember, "array.zeros(shape, dtype=FLOAT32) -> Array", "An array of zeros."},
	{"array.full", DocMember, "array.full(shape, v, dtype=FLOAT32) -> Array", "An array filled with v."},
	{"array.arange", DocMember, "array.arange(n, dtype=FLOAT32) -> Array", "0, 1, ..., n-1."},
	{"array.from_list", DocMember, "array.from_list(list, dtype=FLOAT32) -> Array", "An array from (nested) lists."},
	{"array.frombytes", DocMember, "array.frombytes(b, dtype) -> Array", "An array over the bytes b."},
	{"array.matmul", DocMember, "array.matmul(a, b) -> Array", "Matrix product of two 2-d arrays."},
	{"array.max_abs_diff", DocMember, "array.max_abs_diff(a, b) -> float", "The largest elementwise |a - b|."},

	// Array.
	{"Array", DocType, "Array", "A typed n-d array: indexing, slicing, + - * / elementwise (with arrays of the same shape or numbers)."},
	{"Array.shape", DocMember, "a.shape -> tuple of int", "The shape."},
	{"Array.dtype", DocMember, "a.dtype -> DataType", "The element type."},
	{"Array.ndim", DocMember, "a.ndim -> int", "The number of dimensions."},
	{"Array.size", DocMember, "a.size -> int", "The number of elements."},
	{"Array.sum", DocMember, "a.sum() -> number", "The sum of the elements."},
	{"Array.max", DocMember, "a.max() -> number", "The largest element."},
	{"Array.min", DocMember, "a.min() -> number", "The smallest element."},
	{"Array.mean", DocMember, "a.mean() -> float", "The mean of the elements."},
	{"Array.abs", DocMember, "a.abs() -> Array", "Elementwise absolute value."},
	{"Array.reshape", DocMember, "a.reshape(shape) -> Array", "The same elements in another shape."},
	{"Array.astype", DocMember, "a.astype(dtype) -> Array", "Converted to another data type."},
	{"Array.copy", DocMember, "a.copy() -> Array", "An independent copy."},
	{"Array.tolist", DocMember, "a.tolist() -> list", "The elements as (nested) lists."},
	{"Array.tobytes", DocMember, "a.tobytes() -> bytes", "The raw little-endian encoding."},

	// DataType values.
	{"DataType.name", DocMember, "dt.name -> string", "The lower-case name, e.g. \"float32\"."},
	{"DataType.itemsize", DocMember, "dt.itemsize -> int", "Bytes per element."},

	// assert module.
	{"assert.eq", DocMember, "assert.eq(a, b, msg=\"\")", "Fails unless a == b."},
	{"assert.ne", DocMember, "assert.ne(a, b, msg=\"\")", "Fails if a == b."},
	{"assert.true", DocMember, "assert.true(x, msg=\"\")", "Fails unless x is true."},
	{"assert.fails", DocMember, "assert.fails(fn, regex, *args)", "Calls fn(*args) and requires an error whose message matches regex."},
	{"assert.allclose", DocMember, "assert.allclose(actual, expected, rtol=1e-5, atol=1e-8)", "Elementwise |actual - expected| <= atol + rtol*|expected| for arrays, tensors or lists."},
}
