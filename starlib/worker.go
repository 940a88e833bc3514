package starlib

import (
	"fmt"
	"math"
	"time"

	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/engine/proc"
	"simpler/engine/remote"
	"simpler/hal"
	"simpler/internal/race"
)

// Worker is the Starlark value of an engine.Worker.
type Worker struct {
	s        *Session
	w        *engine.Worker
	platform string
	mode     string
	devices  []int
}

func (w *Worker) String() string {
	return fmt.Sprintf("Worker(level=%d, platform=%s, device_ids=%s)", w.w.Level(), w.platform, starlark.NewList(intTuple(w.devices)))
}
func (w *Worker) Type() string         { return "Worker" }
func (w *Worker) Freeze()              {}
func (w *Worker) Truth() starlark.Bool { return true }
func (w *Worker) Hash() (uint32, error) {
	return 0, errorf(engine.TypeError, "unhashable type: Worker")
}

// Engine returns the engine worker.
func (w *Worker) Engine() *engine.Worker { return w.w }

type workerMethod func(w *Worker, th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error)

var workerMethods = map[string]workerMethod{
	"register":   (*Worker).register,
	"unregister": (*Worker).unregister,
	"add_worker": (*Worker).addWorker,
	"init":       (*Worker).init,
	"run":        (*Worker).run,
	"submit":     (*Worker).submit,
	"close":      (*Worker).close,
	"malloc":     (*Worker).malloc,
	"free":       (*Worker).free,
	"copy_to":    (*Worker).copyTo,
	"copy_from":  (*Worker).copyFrom,

	"create_host_buffer": (*Worker).createHostBuffer,
	"free_host_buffer":   (*Worker).freeHostBuffer,
	"create_buffer":      (*Worker).createBuffer,
	"release_buffer":     (*Worker).releaseBuffer,

	"add_remote_worker":     (*Worker).addRemoteWorker,
	"add_worker_group":      (*Worker).addWorkerGroup,
	"remote_malloc":         (*Worker).remoteMalloc,
	"remote_free":           (*Worker).remoteFree,
	"remote_copy_to":        (*Worker).remoteCopyTo,
	"remote_copy_from":      (*Worker).remoteCopyFrom,
	"remote_export":         (*Worker).remoteExport,
	"remote_import":         (*Worker).remoteImport,
	"remote_release_import": (*Worker).remoteReleaseImport,
}

func (w *Worker) Attr(name string) (starlark.Value, error) {
	switch name {
	case "level":
		return starlark.MakeInt(w.w.Level()), nil
	case "platform":
		return starlark.String(w.platform), nil
	case "mode":
		return starlark.String(w.mode), nil
	case "device_ids":
		return starlark.NewList(intTuple(w.devices)), nil
	case "num_sub_workers":
		return starlark.MakeInt(w.w.SubCount()), nil
	case "live_domains":
		return w.liveDomains(), nil
	}
	if m, ok := workerMethods[name]; ok {
		return builtin(name, func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
			return m(w, th, args, kw)
		}), nil
	}
	return nil, nil
}

func (w *Worker) AttrNames() []string {
	return append(sortedKeys(workerMethods), "device_ids", "level", "live_domains", "mode", "num_sub_workers", "platform")
}

// atRunTime refuses engine builtins while a module is being loaded, so
// that loading a module never has side effects.
func atRunTime(th *starlark.Thread, what string) error {
	if th.Local(loadingKey) != nil {
		return errorf(engine.RuntimeError, "%s may only be called at run time, from main() or a function it calls", what)
	}
	return nil
}

// deviceKwargHint refuses Worker(devices=...), the flag's name, with the
// keyword the Worker's level takes (Starlark's own spelling hint offers
// device_id, which is wrong for the usual level 3).
func deviceKwargHint(kw []starlark.Tuple) error {
	level := starlark.Value(starlark.MakeInt(3))
	name := ""
	for _, p := range kw {
		switch k := p[0].(starlark.String); k {
		case "level":
			level = p[1]
		case "devices", "device":
			name = string(k)
		}
	}
	switch {
	case name == "":
		return nil
	case level == starlark.MakeInt(2):
		return fmt.Errorf("TypeError: Worker: no keyword argument %s: a level-2 Worker takes one chip, device_id=N", name)
	}
	return fmt.Errorf("TypeError: Worker: no keyword argument %s: did you mean device_ids=[...] (the chips of a level-3 Worker; ctx.device_ids holds --devices)?", name)
}

// workerHere refuses Worker() where a Worker may not be made: in shipped
// code (whose refusal says more), inside a task, and at a module's top
// level.
func (s *Session) workerHere(th *starlark.Thread) error {
	if err := s.refuseShipped("Worker()"); err != nil {
		return err
	}
	if err := refuseInTask(th, "Worker()"); err != nil {
		return err
	}
	return atRunTime(th, "Worker()")
}

// workerSeconds turns Worker's timeout arguments into durations.
func workerSeconds(timeouts map[string]starlark.Value) (map[string]time.Duration, error) {
	durations := map[string]time.Duration{}
	for name, v := range timeouts {
		d, err := seconds("Worker", name, v)
		if err != nil {
			return nil, err
		}
		durations[name] = d
	}
	return durations, nil
}

// newWorker implements Worker(...).
func (s *Session) newWorker(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if err := s.workerHere(th); err != nil {
		return nil, err
	}
	level := 3
	platform := s.Platform
	mode := s.Mode
	var deviceID, deviceIDs, heapRingV, globalRanks, seedV starlark.Value = starlark.None, starlark.None, starlark.None, starlark.None, starlark.None
	numSub := 0
	enableSDMA, orderHazards := false, false
	var controlT, startupT, sessionT, taskT, healthT, closeT starlark.Value = starlark.None, starlark.None, starlark.None, starlark.None, starlark.None, starlark.None
	commProfile := "sim"
	if err := deviceKwargHint(kw); err != nil {
		return nil, err
	}
	if err := starlark.UnpackArgs("Worker", args, kw,
		"level?", &level, "platform?", &platform, "device_id?", &deviceID, "device_ids?", &deviceIDs,
		"num_sub_workers?", &numSub, "mode?", &mode, "enable_sdma?", &enableSDMA,
		"heap_ring_size?", &heapRingV, "control_timeout_s?", &controlT, "startup_timeout_s?", &startupT,
		"remote_session_timeout_s?", &sessionT, "comm_profile?", &commProfile,
		"global_device_ranks?", &globalRanks, "task_timeout_s?", &taskT, "health_timeout_s?", &healthT,
		"close_timeout_s?", &closeT, "order_hazards?", &orderHazards, "seed?", &seedV); err != nil {
		return nil, err
	}
	if err := s.workerSeed(th, seedV); err != nil {
		return nil, err
	}
	heapRing, err := noneOrInt("heap_ring_size", heapRingV) // None: the default, as upstream
	if err != nil {
		return nil, err
	}
	durations, err := workerSeconds(map[string]starlark.Value{"control_timeout_s": controlT, "startup_timeout_s": startupT, "remote_session_timeout_s": sessionT,
		"task_timeout_s": taskT, "health_timeout_s": healthT, "close_timeout_s": closeT})
	if err != nil {
		return nil, err
	}
	p, err := hal.Lookup(platform)
	if err != nil {
		return nil, engine.Wrap(err, "Worker")
	}
	devices, err := workerDevices(level, deviceID, deviceIDs)
	if err != nil {
		return nil, err
	}
	// comm_profile is checked by engine.NewWorker (hal.Platform.Serves).
	cfg := engine.Config{
		Level: level, Platform: p, DeviceIDs: devices, NumSubWorkers: numSub,
		Mode: mode, EnableSDMA: enableSDMA, HeapRingSize: heapRing, CommProfile: commProfile,
		OrderHazards: orderHazards, Race: s.Race, Det: s.Det,
	}
	if globalRanks != starlark.None {
		if cfg.GlobalDeviceRanks, err = intList("Worker", "global_device_ranks", globalRanks); err != nil {
			return nil, err
		}
	}
	cfg.StartupTimeout, cfg.SessionTimeout = durations["startup_timeout_s"], durations["remote_session_timeout_s"]
	cfg.ControlTimeout, cfg.TaskTimeout = durations["control_timeout_s"], durations["task_timeout_s"]
	cfg.HealthTimeout, cfg.CloseTimeout = durations["health_timeout_s"], durations["close_timeout_s"]
	if level >= 4 { // add_remote_worker's nodes: the code they run, and the TCP transport
		cfg.Sources = s.sources()
		cfg.Dial = remote.Dial
		cfg.StartGroup = s.groupStarter()
	}
	if mode == "process" && s.Launcher != nil { // child processes: this binary again, by engine/proc
		l := *s.Launcher
		l.Bundle = s.bundle()
		cfg.Launcher, cfg.Spawn = &l, proc.Spawner{}
	}
	ew, err := engine.NewWorker(cfg)
	if err != nil {
		return nil, err
	}
	w := &Worker{s: s, w: ew, platform: p.Name(), mode: mode, devices: devices}
	s.track(w)
	if s.OnWorker != nil {
		s.OnWorker(ew)
	}
	return w, nil
}

// seconds checks an optional timeout argument.
func seconds(op, name string, v starlark.Value) (time.Duration, error) {
	if v == starlark.None {
		return 0, nil
	}
	f, ok := starlark.AsFloat(v)
	if !ok {
		return 0, errorf(engine.TypeError, "%s: %s must be a number of seconds, got %s", op, name, v.Type())
	}
	if f <= 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, errorf(engine.ValueError, "%s: %s must be > 0, got %v", op, name, f)
	}
	return time.Duration(f * float64(time.Second)), nil
}

func workerDevices(level int, deviceID, deviceIDs starlark.Value) ([]int, error) {
	if deviceID != starlark.None && deviceIDs != starlark.None {
		return nil, errorf(engine.ValueError, "Worker: give device_id or device_ids, not both")
	}
	if deviceID != starlark.None {
		id, err := starlark.AsInt32(deviceID)
		if err != nil {
			return nil, errorf(engine.TypeError, "Worker: device_id must be an int, got %s", deviceID.Type())
		}
		return []int{id}, nil
	}
	if deviceIDs == starlark.None {
		if level <= 3 {
			return []int{0}, nil
		}
		return nil, nil
	}
	it, ok := deviceIDs.(starlark.Indexable)
	if !ok {
		return nil, errorf(engine.TypeError, "Worker: device_ids must be a list of ints, got %s", deviceIDs.Type())
	}
	ids := make([]int, it.Len())
	for i := range ids {
		id, err := starlark.AsInt32(it.Index(i))
		if err != nil {
			return nil, errorf(engine.TypeError, "Worker: device_ids[%d] must be an int, got %s", i, it.Index(i).Type())
		}
		ids[i] = id
	}
	return ids, nil
}

func noArgs(op string, args starlark.Tuple, kw []starlark.Tuple) error {
	return starlark.UnpackPositionalArgs(op, args, kw, 0)
}

func (w *Worker) register(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var fnV starlark.Value
	var workersV starlark.Value = starlark.None
	if err := starlark.UnpackArgs("register", args, kw, "fn", &fnV, "workers?", &workersV); err != nil {
		return nil, err
	}
	fn, ok := fnV.(*starlark.Function)
	if !ok {
		return nil, errorf(engine.TypeError, "register: want a Starlark function, got %s", fnV.Type())
	}
	c, err := w.s.callableFor("register", fn)
	if err != nil {
		return nil, err
	}
	var workers []int
	if workersV != starlark.None {
		ids, err := intList("register", "workers", workersV)
		if err != nil {
			return nil, err
		}
		workers = ids
	}
	h, err := w.w.Registry().Register(c, workers)
	if err != nil {
		return nil, err
	}
	return &Handle{h: h}, nil
}

func (w *Worker) unregister(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var hv starlark.Value
	if err := starlark.UnpackPositionalArgs("unregister", args, kw, 1, &hv); err != nil {
		return nil, err
	}
	// A CallableHandle is passed as it is, so that the engine refuses one
	// registered on another worker instead of it being resolved, by its
	// function, to this worker's handle.
	if x, ok := hv.(*Handle); ok {
		return starlark.None, w.w.Registry().Unregister(x.h)
	}
	h, err := w.s.handleFor("unregister", hv, w.w)
	if err != nil {
		return nil, err
	}
	return starlark.None, w.w.Registry().Unregister(h)
}

func intList(op, name string, v starlark.Value) ([]int, error) {
	it, ok := v.(starlark.Indexable)
	if !ok {
		return nil, errorf(engine.TypeError, "%s: %s must be a list of ints, got %s", op, name, v.Type())
	}
	ids := make([]int, it.Len())
	for i := range ids {
		x, ok := it.Index(i).(starlark.Int)
		if !ok {
			return nil, errorf(engine.TypeError, "%s: %s[%d] must be an int, got %s", op, name, i, it.Index(i).Type())
		}
		n, ok := x.Int64()
		if !ok || n < math.MinInt32 || n > math.MaxInt32 {
			return nil, errorf(engine.ValueError, "%s: %s[%d] = %s is out of range", op, name, i, x)
		}
		ids[i] = int(n)
	}
	return ids, nil
}

func (w *Worker) addWorker(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var cv starlark.Value
	if err := starlark.UnpackPositionalArgs("add_worker", args, kw, 1, &cv); err != nil {
		return nil, err
	}
	child, ok := cv.(*Worker)
	if !ok {
		return nil, errorf(engine.TypeError, "add_worker: want a Worker, got %s", cv.Type())
	}
	id, err := w.w.AddWorker(child.w)
	if err != nil {
		return nil, err
	}
	return starlark.MakeInt(id), nil
}

func (w *Worker) init(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if err := noArgs("init", args, kw); err != nil {
		return nil, err
	}
	return starlark.None, w.w.Init()
}

func (w *Worker) close(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if err := noArgs("close", args, kw); err != nil {
		return nil, err
	}
	return starlark.None, w.w.Close()
}

// buildingKey is the thread-local list of the runs whose orchestration
// functions the thread is inside of, innermost last (orchCall.build).
const buildingKey = "simpler.building"

// taskArgs accepts None or a TaskArgs value.
func taskArgs(op string, v starlark.Value) (*engine.TaskArgs, error) {
	switch x := v.(type) {
	case starlark.NoneType:
		return nil, nil
	case *TaskArgs:
		return x.a, x.live(op)
	}
	return nil, errorf(engine.TypeError, "%s: args must be a TaskArgs, got %s", op, v.Type())
}

func (w *Worker) malloc(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var size, worker int
	if err := starlark.UnpackArgs("malloc", args, kw, "size", &size, "worker_id?", &worker); err != nil {
		return nil, err
	}
	d, err := directFor(th, "malloc", w.w)
	if err != nil {
		return nil, err
	}
	p, err := d.Malloc("malloc", worker, size)
	if err != nil {
		return nil, err
	}
	return starlark.MakeUint64(p), nil
}

func (w *Worker) free(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var ptrV starlark.Value
	var worker int
	if err := starlark.UnpackArgs("free", args, kw, "ptr", &ptrV, "worker_id?", &worker); err != nil {
		return nil, err
	}
	ptr, err := toAddr("free", ptrV)
	if err != nil {
		return nil, err
	}
	d, err := directFor(th, "free", w.w)
	if err != nil {
		return nil, err
	}
	return starlark.None, d.Free("free", worker, ptr)
}

func (w *Worker) copyTo(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var dstV, srcV starlark.Value
	var size, worker int
	if err := starlark.UnpackArgs("copy_to", args, kw, "dst", &dstV, "src", &srcV, "size", &size, "worker_id?", &worker); err != nil {
		return nil, err
	}
	dst, src, err := deviceAndHost("copy_to", dstV, srcV, size)
	if err != nil {
		return nil, err
	}
	d, err := directFor(th, "copy_to", w.w)
	if err != nil {
		return nil, err
	}
	if err := d.CopyTo("copy_to", worker, dst, src); err != nil {
		return nil, err
	}
	raceCopy(th, w.w, worker, dst, src, race.Write, "copy_to")
	return starlark.None, nil
}

func (w *Worker) copyFrom(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var dstV, srcV starlark.Value
	var size, worker int
	if err := starlark.UnpackArgs("copy_from", args, kw, "dst", &dstV, "src", &srcV, "size", &size, "worker_id?", &worker); err != nil {
		return nil, err
	}
	src, dst, err := deviceAndHost("copy_from", srcV, dstV, size)
	if err != nil {
		return nil, err
	}
	d, err := directFor(th, "copy_from", w.w)
	if err != nil {
		return nil, err
	}
	if err := d.CopyFrom("copy_from", worker, dst, src); err != nil {
		return nil, err
	}
	raceCopy(th, w.w, worker, src, dst, race.Read, "copy_from")
	return starlark.None, nil
}

// deviceAndHost resolves a copy's device address and host bytes. The host
// side is a host Tensor (bounded by its size) or an address in shared
// memory.
func deviceAndHost(op string, devV, hostV starlark.Value, size int) (uint64, []byte, error) {
	if size <= 0 {
		return 0, nil, errorf(engine.ValueError, "%s: size must be > 0, got %d", op, size)
	}
	dev, err := toAddr(op, devV)
	if err != nil {
		return 0, nil, err
	}
	if t, ok := devV.(*Tensor); ok && !t.t.ChildMemory {
		return 0, nil, errorf(engine.ValueError, "%s: the device side is a host tensor; pass a device pointer", op)
	}
	if t, ok := hostV.(*Tensor); ok {
		if t.t.ChildMemory {
			return 0, nil, errorf(engine.ValueError, "%s: the host side is a device tensor; pass a host tensor", op)
		}
		if size > t.t.NBytes() {
			return 0, nil, errorf(engine.ValueError, "%s: size %d exceeds the host tensor's %d bytes", op, size, t.t.NBytes())
		}
	}
	addr, err := toAddr(op, hostV)
	if err != nil {
		return 0, nil, err
	}
	host, err := hostmem.Resolve(addr, size)
	if err != nil {
		return 0, nil, engine.Wrap(err, op)
	}
	return dev, host, nil
}

// noneOrInt is Worker's integer parameter name: None gives 0, the
// engine's default.
func noneOrInt(name string, v starlark.Value) (int, error) {
	if v == starlark.None {
		return 0, nil
	}
	var n int
	if err := starlark.AsInt(v, &n); err != nil {
		return 0, engine.Errorf(engine.TypeError, "Worker: for parameter %q: got %s, want int or None", name, v.Type())
	}
	return n, nil
}
