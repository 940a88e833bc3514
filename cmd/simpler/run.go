package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"simpler/engine"
	"simpler/engine/proc"
	"simpler/engine/remote"
	"simpler/hal"
	"simpler/hal/shm"
	"simpler/internal/race"
	"simpler/kind"
	"simpler/starlib"
)

// runFlags are the flags shared by commands that start a session.
type runFlags struct {
	platform string
	devices  string
	mode     string
	loadPath pathList
	race     bool
}

// pathList is a flag that may be given many times, each adding a path.
type pathList []string

func (p *pathList) String() string     { return strings.Join(*p, ",") }
func (p *pathList) Set(v string) error { *p = append(*p, v); return nil }

func (f *runFlags) register(fs *flag.FlagSet) {
	def := os.Getenv("SIMPLER_PLATFORM")
	if def == "" {
		def = "a2a3sim"
	}
	fs.StringVar(&f.platform, "platform", def, "platform `P`: a2a3sim, a5sim, a2a3 or a5 (the default is $SIMPLER_PLATFORM when it is set)")
	fs.StringVar(&f.devices, "devices", "0,1", "device `IDS`: a list such as 0,2,3, a range such as 0-3, or both (0-1,4)")
	fs.StringVar(&f.mode, "mode", "thread", "worker `MODE`: thread or process")
	fs.Var(&f.loadPath, "load-path", "also let load() read files below `DIR` (repeatable)")
	fs.BoolVar(&f.race, "race", false, "check every memory access of the kernels, SUB callables and orchestration for data races, and the waits for deadlocks (docs/race.md); exit status 66 when a race is found")
}

// check validates the flags and returns the device ids. A platform this
// machine cannot run (an onboard one without the vendor runtime) is
// reported first, with what to install: every later error would only be
// a consequence of it.
func (f *runFlags) check() ([]int, error) {
	p, err := hal.Lookup(f.platform)
	if err != nil {
		if os.Getenv("SIMPLER_PLATFORM") == f.platform {
			return nil, fmt.Errorf("ValueError: $SIMPLER_PLATFORM is %q, which is not a platform (want one of %s, or unset it)", f.platform, strings.Join(hal.Names(), ", "))
		}
		return nil, err
	}
	if err := p.Check(); err != nil {
		return nil, err
	}
	if f.mode != "thread" && f.mode != "process" {
		return nil, fmt.Errorf("ValueError: --mode must be thread or process, got %q", f.mode)
	}
	for _, dir := range f.loadPath {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("ValueError: --load-path %s: not a directory", dir)
		}
	}
	return parseDevices(f.devices)
}

// apply gives a session the flags' load roots and, with --race, its
// detector.
func (f *runFlags) apply(s *starlib.Session) error {
	if f.race {
		s.Race = race.New(s.Stderr)
	}
	for _, dir := range f.loadPath {
		if err := s.AddLoadPath(dir); err != nil {
			return err
		}
	}
	return nil
}

// parseDevices accepts "0-3", "0,2,5" or a mix such as "0-1,4".
func parseDevices(s string) ([]int, error) {
	var ids []int
	seen := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(strings.TrimSpace(lo))
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(strings.TrimSpace(hi))
		}
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, fmt.Errorf("ValueError: --devices: bad item %q (want ids such as 0-3 or 0,2)", part)
		}
		for id := a; id <= b; id++ {
			if seen[id] {
				return nil, fmt.Errorf("ValueError: --devices: device %d listed twice", id)
			}
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	rc, code, ok := parseRun(args, stdout, stderr)
	if !ok {
		return code
	}
	f := &rc.opts
	devices, err := f.check()
	if err == nil {
		err = f.det.parse(f.mode)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if f.det.exploreN > 0 || f.det.checkReplay {
		return f.det.runChildren(rc.script, childArgs(rc.given), stdout, stderr)
	}
	rc.warnMisplacedFlags(stderr)
	shm.SweepDead() // objects of simpler processes that died without cleaning up
	stopDaemons, err := rc.startDaemons(stderr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if stopDaemons != nil {
		defer stopDaemons()
	}
	s, obs, err := rc.openSession(devices, stdout, stderr)
	if err != nil { // before the script runs, not after it
		fmt.Fprintln(stderr, err)
		return 2
	}
	remote.SetForwardedOutput(s.Stdout, s.Stderr, !rc.opts.noTags) // what remote nodes print, where the script's goes
	remote.SetGroupRace(f.race)                                    // the ranks of its worker groups check themselves too
	intr := watchInterrupts(s, stopDaemons, stderr)
	stopProfile, err := startProfile(f.profile)
	if err != nil {
		s.Close()
		fmt.Fprintln(stderr, err)
		return 2
	}
	err = s.RunFile(rc.script)
	if cerr := s.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if perr := stopProfile(); err == nil && perr != nil {
		err = perr
	}
	sig := intr.stop()
	writeSchedule(s.Det, f.det.decisions)
	if terr := obs.finish(); terr != nil {
		fmt.Fprintln(stderr, terr)
		if err == nil && sig == nil {
			return 1
		}
	}
	raced := raceSummary(s, stderr)
	if sig != nil {
		fmt.Fprintf(stderr, "simpler run: interrupted by %s: the runs were cancelled and everything closed\n", signalName(sig))
		return exitCode(sig)
	}
	if err != nil {
		// In red on a terminal (unless NO_COLOR), as the REPL and
		// simpler test print their failures.
		fmt.Fprintln(stderr, newPainter(stderr).red(s.Backtrace(err)))
		rc.explainFailure(stderr)
		return 1
	}
	if raced {
		return exitRace
	}
	return 0
}

// startProfile starts --cpuprofile's CPU profile into file ("": none)
// and returns what ends it.
func startProfile(file string) (stop func() error, err error) {
	if file == "" {
		return func() error { return nil }, nil
	}
	out, err := os.Create(file)
	if err != nil {
		return nil, kind.Errorf(kind.ValueError, "--cpuprofile: %v", err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		out.Close()
		return nil, kind.Errorf(kind.RuntimeError, "--cpuprofile: %v", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return out.Close()
	}, nil
}

// openSession makes the script's session as the flags say, with its
// schedule (--seed), load roots, detector (--race) and observers. An
// error is the command line's (exit 2), and leaves nothing open.
func (rc *runCommand) openSession(devices []int, stdout, stderr io.Writer) (*starlib.Session, *runObservers, error) {
	f := &rc.opts
	s := starlib.NewSession(f.platform, devices, f.mode, rc.argv, stdout, stderr)
	s.Launcher = launcher()
	s.SetMaxSteps(f.maxSteps)
	obs, err := rc.prepare(s, stderr)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return s, obs, nil
}

func (rc *runCommand) prepare(s *starlib.Session, stderr io.Writer) (*runObservers, error) {
	f := &rc.opts
	if err := f.det.attach(s, f.det.seedN, stderr); err != nil {
		return nil, err
	}
	if err := f.apply(s); err != nil {
		return nil, err
	}
	obs, err := newRunObservers(f.trace, stderr)
	if err != nil {
		return nil, err
	}
	if s.Det != nil {
		obs.useClock(s.Det.Clock) // a seed's trace replays too
	}
	obs.attach(s)
	return obs, nil
}

// exitRace is the exit status of a run that found a data race, as Go's
// race detector's: a failure of its own, beside a script's error (1).
const exitRace = 66

// otherNodesRaces are the counts of the remote nodes (each came in its
// node's COMPLETIONs) and of the level-3 node processes (each asked at
// its close).
func otherNodesRaces() []race.NodeCount {
	return append(remote.RemoteRaces(), proc.NodeProcessRaces()...)
}

// raceSummary prints what --race found, if anything, here and on the
// other nodes (otherNodesRaces), and reports whether it found something.
// Under --race a remote node whose daemon runs without it is named once,
// as not checked; without --race here, what a node's daemon checked
// still counts. A script's own failure keeps its status: the summary
// never hides it.
func raceSummary(s *starlib.Session, stderr io.Writer) bool {
	nodes := otherNodesRaces()
	sum, local := "", 0
	if s.Race != nil {
		warnUnchecked(nodes, stderr)
		sum, local = s.Race.Summary(), s.Race.Races()
	}
	remoteN, where := 0, []string(nil)
	for _, n := range nodes {
		if n.Races > 0 {
			remoteN += n.Races
			where = append(where, fmt.Sprintf("%d on %s", n.Races, n.Node))
		}
	}
	if remoteN == 0 {
		if sum == "" {
			return false
		}
		fmt.Fprintln(stderr, sum)
		return true
	}
	// The local summary's lines of repeated pairs stay; its closing
	// count becomes the total, and a line says where the rest were.
	if i := strings.LastIndex(sum, "\n"); i >= 0 {
		fmt.Fprintln(stderr, sum[:i])
	}
	fmt.Fprintf(stderr, "simpler: found %d data race(s)\n", local+remoteN)
	fmt.Fprintf(stderr, "simpler: %s, %d in this process\n", strings.Join(where, ", "), local)
	return true
}

// warnUnchecked names, once each, the nodes that ran without a detector.
func warnUnchecked(nodes []race.NodeCount, stderr io.Writer) {
	for _, n := range nodes {
		if !n.Checked {
			fmt.Fprintf(stderr, "simpler: warning: %s was not checked for data races: its remote-l3-worker daemon runs without --race\n", n.Node)
		}
	}
}

// interrupts watches SIGINT, SIGTERM and SIGHUP while a script runs. The
// first signal cancels its runs and stops its main thread: close then runs
// within its bound, the trace so far is written, the progress line
// cleared. After a SIGTERM or SIGHUP the process ends within forceAfter
// whatever close is doing; a second signal of any kind ends it at once.
// Ending it (force) kills the child processes and remote sessions this
// process started, stops its daemons, removes its shared memory and exits.
type interrupts struct {
	s           *starlib.Session
	stopDaemons func()
	stderr      io.Writer
	ch          chan os.Signal
	done        chan struct{}
	mu          sync.Mutex
	state       signalState
}

// forceAfter bounds how long a SIGTERM or SIGHUP waits for the graceful
// close: the default close_timeout_s, and the grace after it in which the
// runs' kernels must stop (engine's drainRuns).
const forceAfter = engine.DefaultCloseTimeout + 3*engine.StopGrace

// killBound bounds how long force waits for the kill of what this process
// started before it exits all the same (its daemons get SIGTERM when it
// exits, its child processes notice they are orphans).
const killBound = 2 * time.Second

// signalAction is what a signal asks for.
type signalAction uint8

const (
	cancelRuns        signalAction = iota // end the script gracefully
	cancelRunsBounded                     // the same, and force after forceAfter
	forceEnd                              // end the process now
)

// signalState is the decision of what each signal does, stepped directly
// by its test: the first SIGINT is graceful, the first SIGTERM or SIGHUP
// graceful within a bound, any second signal forces the end.
type signalState struct {
	first os.Signal
}

func (st *signalState) next(sig os.Signal) signalAction {
	if st.first != nil {
		return forceEnd
	}
	st.first = sig
	if sig == syscall.SIGINT {
		return cancelRuns
	}
	return cancelRunsBounded
}

func watchInterrupts(s *starlib.Session, stopDaemons func(), stderr io.Writer) *interrupts {
	in := &interrupts{s: s, stopDaemons: stopDaemons, stderr: stderr, ch: make(chan os.Signal, 2), done: make(chan struct{})}
	signal.Notify(in.ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go in.watch()
	return in
}

func (in *interrupts) watch() {
	var deadline <-chan time.Time
	for {
		select {
		case <-in.done:
			return
		case <-deadline:
			in.force(in.first(), fmt.Sprintf("not closed within %v of the signal", forceAfter))
		case sig := <-in.ch:
			in.mu.Lock()
			action := in.state.next(sig)
			in.mu.Unlock()
			switch action {
			case cancelRuns:
				in.s.Interrupt("interrupted by " + signalName(sig))
			case cancelRunsBounded:
				deadline = time.After(forceAfter)
				in.s.Interrupt("interrupted by " + signalName(sig))
			case forceEnd:
				in.force(sig, "a second signal")
			}
		}
	}
}

// first is the first signal that came.
func (in *interrupts) first() os.Signal {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.state.first
}

// force ends the process: it kills what this process started (waiting at
// most killBound for that), removes its shared memory and exits with sig's
// status. It does not return.
func (in *interrupts) force(sig os.Signal, why string) {
	fmt.Fprintf(in.stderr, "simpler run: %s: ending now; the child processes and sessions it started are killed\n", why)
	killed := make(chan struct{})
	go func() {
		in.s.Kill()
		if in.stopDaemons != nil {
			in.stopDaemons()
		}
		close(killed)
	}()
	select {
	case <-killed:
	case <-time.After(killBound):
	}
	shm.RemoveOwn()
	os.Exit(exitCode(sig))
}

// stop ends the watch and returns the first signal, if one came.
func (in *interrupts) stop() os.Signal {
	signal.Stop(in.ch)
	close(in.done)
	return in.first()
}

// signalName is how messages name sig: "SIGINT (Ctrl-C)", "SIGTERM",
// "SIGHUP". Go's own name of SIGINT is "interrupt", which makes
// "interrupted by interrupt".
func signalName(sig os.Signal) string {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return sig.String()
	}
	name := unix.SignalName(s)
	if name == "" {
		return sig.String()
	}
	if s == syscall.SIGINT {
		name += " (Ctrl-C)"
	}
	return name
}

// exitCode is the conventional status of a process ended by sig: 128
// plus its number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP).
func exitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

func cmdPlatforms(stdout io.Writer) int {
	for _, name := range hal.Names() {
		p, _ := hal.Lookup(name)
		a := p.Arch()
		kind := "simulated"
		if !p.Simulated() {
			kind = "onboard"
		}
		var dts []string
		for _, d := range a.DTypes {
			dts = append(dts, d.String())
		}
		status := "available"
		if err := p.Check(); err != nil {
			status = "unavailable: " + err.Error()
		}
		fmt.Fprintf(stdout, "%s (%s, %s architecture)\n", name, kind, a.Name)
		fmt.Fprintf(stdout, "  max chips:     %d\n", a.MaxChips)
		fmt.Fprintf(stdout, "  device memory: %d GiB\n", a.DeviceMemory>>30)
		fmt.Fprintf(stdout, "  comm profiles: %s\n", strings.Join(p.CommProfiles(), ", "))
		fmt.Fprintf(stdout, "  sdma:          %v\n", hal.SDMA(p))
		fmt.Fprintf(stdout, "  data types:    %s\n", strings.Join(dts, ", "))
		fmt.Fprintf(stdout, "  status:        %s\n", status)
	}
	return 0
}
