// Package starlib is the Starlark binding of simpler: the builtins of the
// script surface (Worker, host_tensor, TaskArgs, ...), the values they
// return, module loading (relative files and the embedded @simpler//
// standard library), and errors that keep their kind ("ValueError: ...")
// with file:line backtraces.
//
// Loading a module has no side effects: engine builtins refuse to run
// while a module's top level executes, so any process can load a module to
// find a registered function.
//
// Code shipped to a remote node (NewSourceResolver) is a task, not a host
// program: Worker(), add_remote_worker and add_worker_group refuse there
// with a RuntimeError (shipped.go).
//
// load() reads only regular files of at most MaxModuleSize bytes below the
// load roots: the main script's directory and the directories given to
// AddLoadPath (--load-path). A module's top level runs at most
// MaxLoadSteps steps; SetMaxSteps (--max-steps) bounds every thread of the
// script.
package starlib

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/internal/dsched"
	"simpler/internal/halt"
	"simpler/internal/race"
)

// Session is one script's world: its loader, its host memory and the
// workers it made. Close releases all of it.
type Session struct {
	Platform  string   // default platform for Worker()
	DeviceIDs []int    // ctx.device_ids
	Mode      string   // default mode for Worker()
	Argv      []string // ctx.argv
	Stdout    io.Writer
	Stderr    io.Writer
	// OnWorker, if set, is called with every engine Worker a script
	// makes, before Worker() returns and so before its init(): the CLI
	// attaches its observers (traces, progress, the REPL) here.
	OnWorker func(*engine.Worker)
	// Launcher starts child processes for process mode: the path of the
	// simpler binary and the hidden subcommand that serves a child.
	Launcher *engine.Launcher
	// GroupEnv is added to the environment of every worker group's
	// launcher (mpirun, srun), and so of its ranks on this host. Empty in
	// normal use; the benchmark gives mpirun its consent to run as root
	// here, as tests do (internal/mpitest), never the CLI.
	GroupEnv []string
	// Race is the data-race and deadlock detector (--race): every Worker
	// the script makes reports to it, and every thread carries its
	// context (race.go). Nil: off.
	Race *race.Detector
	// Det is the deterministic schedule (--seed) the script runs under:
	// its main thread is the schedule's first process (det.go). Nil: the
	// OS schedules.
	Det *engine.Det

	// shipped is set for a remote node's session (NewSourceResolver): its
	// code came over the wire, and may not reach the host (shipped.go).
	shipped bool

	mu        sync.Mutex
	outMu     sync.Mutex
	loader    *loader
	space     *hostmem.Space
	callables map[*starlark.Function]*callable
	workers   []*Worker
	main      *starlark.Thread // the thread running main(ctx), for Interrupt
	mainHalt  *halt.Signal     // main's stop signal (halt), for Interrupt
	detMain   *dsched.Proc     // main's process of the schedule, under --seed
	detSeed   uint64           // the schedule's seed
	sinceGC   int              // bytes of host tensors allocated since the last collection (hostalloc.go)
}

// NewSession makes a session with the given defaults.
func NewSession(platform string, devices []int, mode string, argv []string, stdout, stderr io.Writer) *Session {
	s := &Session{Platform: platform, DeviceIDs: devices, Mode: mode, Argv: argv, Stdout: stdout, Stderr: stderr,
		space: hostmem.NewSpace(), callables: map[*starlark.Function]*callable{}}
	s.loader = newLoader(s.predeclared(), s.print)
	return s
}

func (s *Session) print(_ *starlark.Thread, msg string) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	fmt.Fprintln(s.Stdout, msg)
}

func (s *Session) newThread(name string) *starlark.Thread {
	th := &starlark.Thread{Name: name, Print: s.print}
	if s.Race != nil {
		bindRace(th, s.Race.Main())
	}
	reason := fmt.Sprintf("RuntimeError: too many steps (--max-steps %d)", s.loader.maxSteps)
	if s.Det != nil {
		s.detThread(th, s.loader.maxSteps, reason)
	} else if n := s.loader.maxSteps; n != 0 {
		boundSteps(th, n, reason)
	}
	return th
}

// SetMaxSteps bounds the Starlark steps of every thread the script runs
// on (main, each orchestration function, each task of a thread-mode
// kernel or SUB callable) and of each module's top level: past n, the
// thread fails with a RuntimeError. 0, the default, means no bound. Call
// it before RunFile.
func (s *Session) SetMaxSteps(n uint64) { s.loader.maxSteps = n }

// AddLoadPath lets load() read files below dir as well as below the main
// script's directory (simpler run --load-path).
func (s *Session) AddLoadPath(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("ValueError: load path %q: %v", dir, unwrapPathError(err))
	}
	if !fi.IsDir() {
		return fmt.Errorf("ValueError: load path %q: not a directory", dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("ValueError: load path %q: %v", dir, err)
	}
	s.loader.loadPath = append(s.loader.loadPath, abs)
	return nil
}

// boundSteps limits th to n steps; past them it fails with reason, a
// message that starts with its kind.
func boundSteps(th *starlark.Thread, n uint64, reason string) {
	if n == 0 {
		return
	}
	th.SetMaxExecutionSteps(n)
	th.OnMaxSteps = func(th *starlark.Thread) { th.Cancel(reason) }
}

func (s *Session) track(w *Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.workers = append(s.workers, w)
}

// Interrupt ends the script from another goroutine (a signal): every run
// of its workers is cancelled and the main thread stops at its next step,
// failing with reason. Close still has to be called.
func (s *Session) Interrupt(reason string) {
	s.mu.Lock()
	th, stop, workers := s.main, s.mainHalt, append([]*Worker(nil), s.workers...)
	s.mu.Unlock()
	for _, w := range workers {
		w.w.CancelRuns()
	}
	if th != nil {
		th.Cancel(reason)
		stop.Stop(reason) // a builtin main is in (a long matmul) returns too
	}
}

// Kill ends every child process and remote session of the script's
// workers at once (a second interrupt: no waiting).
func (s *Session) Kill() {
	s.mu.Lock()
	workers := append([]*Worker(nil), s.workers...)
	s.mu.Unlock()
	for _, w := range workers {
		w.w.Kill()
	}
}

// Close closes every worker the script left open, then frees host memory.
// The workers stay listed until they are closed, so that a Kill (a second
// interrupt) reaches the ones being closed.
func (s *Session) Close() error {
	s.mu.Lock()
	workers := append([]*Worker(nil), s.workers...)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.workers = nil
		s.mu.Unlock()
	}()
	var first error
	for i := len(workers) - 1; i >= 0; i-- {
		if workers[i].w.Attached() {
			continue // its parent closes it
		}
		if err := workers[i].w.Close(); err != nil && first == nil {
			first = err
		}
	}
	if err := s.space.Close(); err != nil && first == nil {
		first = err
	}
	if s.detMain != nil {
		activeDet.CompareAndSwap(s.Det, nil)
		s.detMain.Exit() // the schedule ends with the script
		s.detMain = nil
		s.Det.S.Close() // frees any goroutine still parked in it (a member a deadlock left)
	}
	return first
}

// RunFile loads path and calls its main(ctx).
func (s *Session) RunFile(path string) error {
	if s.Det != nil && s.detMain == nil {
		p, err := s.Det.S.Main("main")
		if err != nil {
			return err
		}
		s.detMain = p
		activeDet.Store(s.Det)
	}
	name := displayName(path)
	s.loader.root, s.loader.main = filepath.Dir(name), name
	m, err := s.loader.load(name)
	if err != nil {
		return labelled(err)
	}
	mainFn, ok := m.globals["main"]
	if !ok {
		return fmt.Errorf("ValueError: %s has no main(ctx) function", name)
	}
	fn, ok := mainFn.(starlark.Callable)
	if !ok {
		return fmt.Errorf("TypeError: %s: main is a %s, not a function", name, mainFn.Type())
	}
	th := s.newThread("main")
	stop := new(halt.Signal)
	halt.Bind(th, stop)
	s.mu.Lock()
	s.main, s.mainHalt = th, stop
	s.mu.Unlock()
	_, err = starlark.Call(th, fn, starlark.Tuple{s.ctx()}, nil)
	return labelled(err)
}

// displayName shows a script path relative to the working directory when
// it lies below it, as backtraces print it.
func displayName(path string) string {
	if !filepath.IsAbs(path) {
		return filepath.Clean(path)
	}
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	if rel, err := filepath.Rel(wd, path); err == nil && filepath.IsLocal(rel) {
		return rel
	}
	return path
}

func (s *Session) ctx() starlark.Value {
	argv := make([]starlark.Value, len(s.Argv))
	for i, a := range s.Argv {
		argv[i] = starlark.String(a)
	}
	return starlarkstruct.FromStringDict(starlark.String("ctx"), starlark.StringDict{
		"platform":   starlark.String(s.Platform),
		"device_ids": starlark.NewList(intTuple(s.DeviceIDs)),
		"mode":       starlark.String(s.Mode),
		"argv":       starlark.NewList(argv),
	})
}

// Predeclare adds a global visible to every module loaded afterwards (a
// benchmark's or a test's own builtins).
func (s *Session) Predeclare(name string, v starlark.Value) { s.loader.predecl[name] = v }

// Resolve returns the engine worker behind a Worker value and the handle
// a function or CallableHandle value has on it.
func (s *Session) Resolve(worker, fn starlark.Value) (*engine.Worker, *engine.Handle, error) {
	w, ok := worker.(*Worker)
	if !ok {
		return nil, nil, errorf(engine.TypeError, "want a Worker, got %s", worker.Type())
	}
	h, err := s.handleFor("resolve", fn, w.w)
	return w.w, h, err
}
