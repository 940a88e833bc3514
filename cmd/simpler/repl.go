package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"

	"github.com/chzyer/readline"
	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/starlib"
)

const replUsage = "usage: simpler repl [--platform P] [--devices 0-3] [--mode thread|process] [--sub-workers N] [--load-path DIR]..."

const replHelp = `Type Starlark statements; an expression's value is printed.
A line ending in ':' or with open brackets continues; a blank line ends a block.

  w          a level-3 Worker built from the flags, already init()ed
  orch       a statement that uses orch runs as a run of its own on w:
               t = orch.alloc([4], FLOAT32)
               d = orch.allocate_domain(name="ring", window_size=4096)
             (a domain is freed at its run's fence: use :begin to keep
             one run open across statements)

  :begin     open a run on w; statements that use orch join it until :end
  :end       end the open run: wait for its tasks, free its domains
  :domains   every domain seen: live / released / freed, ranks, windows, buffers
  :workers   the worker tree: levels, platforms, chips, SUB workers
  :reset     close every worker and start a fresh session
  :help      this text
  :quit      exit (so does Ctrl-D)

Tab completes names and attributes (w.reg<TAB>); Ctrl-R searches history;
Ctrl-C cancels the running statement (or the line being typed).`

// metaCommands are completed after ':'.
var metaCommands = []string{":begin", ":domains", ":end", ":help", ":quit", ":reset", ":workers"}

// cmdRepl runs the interactive shell.
func cmdRepl(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("repl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, replUsage)
		fs.PrintDefaults()
	}
	var f runFlags
	f.register(fs)
	subs := fs.Int("sub-workers", 1, "SUB workers of w")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, replUsage)
		return 2
	}
	devices, err := f.check()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	r := &repl{flags: f, devices: devices, subs: *subs}
	if err := r.openInput(stdin, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "simpler repl: %v\n", err)
		return 1
	}
	return r.loop()
}

// repl is one interactive session.
type repl struct {
	flags   runFlags
	devices []int
	subs    int

	in      lineReader
	out     io.Writer // for results and the session's print()
	errOut  io.Writer
	paint   painter // for errOut
	prompts bool

	s   *starlib.Session
	env *starlib.Interactive

	mu      sync.Mutex
	workers []*replWorker
	domains map[domainKey]*domainRec
	running *starlark.Thread // the statement being executed, for Ctrl-C

	open *openRun // :begin ... :end
}

// replWorker is an engine Worker the session made.
type replWorker struct {
	index int
	w     *engine.Worker
}

// loop reads and runs chunks until EOF or :quit.
func (r *repl) loop() int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	stopSigs := make(chan struct{})
	sigDone := make(chan struct{})
	go func() {
		defer close(sigDone)
		for {
			select {
			case <-sigs:
				r.interrupt()
			case <-stopSigs:
				return
			}
		}
	}()
	defer func() {
		signal.Stop(sigs)
		close(stopSigs)
		<-sigDone
		r.in.close()
	}()

	if r.prompts {
		fmt.Fprintf(r.out, "simpler %s: Starlark over simulated Ascend NPUs. :help for help, Ctrl-D to exit.\n", Version)
	}
	r.start()
	var next *string // a line already read that starts the next chunk
	for {
		var line string
		var err error
		if next != nil {
			line, next = *next, nil
		} else {
			line, err = r.in.readLine(r.prompt())
		}
		if errors.Is(err, readline.ErrInterrupt) {
			continue
		}
		if err != nil {
			break
		}
		if cmd := strings.TrimSpace(line); strings.HasPrefix(cmd, ":") {
			if !r.meta(cmd) {
				break
			}
			continue
		}
		c, eof, err := r.readChunk(line)
		switch {
		case errors.Is(err, readline.ErrInterrupt):
		case errors.Is(err, io.EOF):
			r.printError(fmt.Errorf("the input ended inside a statement"))
		case err != nil:
			r.printError(err)
		default:
			if c.Rest != "" {
				next = &c.Rest
			}
			if !c.Empty() {
				r.execute(c)
			}
		}
		if eof && next == nil {
			break
		}
	}
	if r.prompts {
		fmt.Fprintln(r.out)
	}
	if err := r.shutdown(); err != nil {
		r.printError(err)
		return 1
	}
	return 0
}

// prompt is ">>> ", or "(run N) >>> " while a run is open.
func (r *repl) prompt() string {
	if !r.prompts {
		return ""
	}
	if r.open != nil {
		return fmt.Sprintf("(run %d) >>> ", r.open.id)
	}
	return ">>> "
}

// readChunk parses a chunk that starts with first, reading continuation
// lines as the parser asks for them. End of input inside a block ends the
// block as a blank line would (so piped input need not end with one);
// eof then reports that there is no more input.
func (r *repl) readChunk(first string) (c *starlib.Chunk, eof bool, err error) {
	var readErr error
	pending := &first
	c, err = r.env.ReadChunk(func() ([]byte, error) {
		if pending != nil {
			line := *pending
			pending = nil
			return []byte(line + "\n"), nil
		}
		if eof {
			readErr = io.EOF
			return nil, io.EOF
		}
		prompt := ""
		if r.prompts {
			prompt = "... "
		}
		line, err := r.in.readLine(prompt)
		if errors.Is(err, io.EOF) {
			eof = true
			return []byte("\n"), nil
		}
		if err != nil {
			readErr = err
			return nil, err
		}
		return []byte(line + "\n"), nil
	})
	if readErr != nil {
		return nil, eof, readErr
	}
	return c, eof, err
}

// start makes a fresh session and the worker w.
func (r *repl) start() {
	r.s = starlib.NewSession(r.flags.platform, r.devices, r.flags.mode, nil, r.out, r.errOut)
	r.s.Launcher = launcher()
	if err := r.flags.apply(r.s); err != nil { // checked at start; a directory removed since
		r.printError(err)
	}
	r.s.OnWorker = r.observe
	r.mu.Lock()
	r.workers = nil
	r.domains = map[domainKey]*domainRec{}
	r.mu.Unlock()
	r.env = r.s.Interactive()
	th := r.env.NewThread("repl setup")
	kw := []starlark.Tuple{
		{starlark.String("level"), starlark.MakeInt(3)},
		{starlark.String("platform"), starlark.String(r.flags.platform)},
		{starlark.String("device_ids"), starlark.NewList(intValues(r.devices))},
		{starlark.String("num_sub_workers"), starlark.MakeInt(r.subs)},
		{starlark.String("mode"), starlark.String(r.flags.mode)},
	}
	w, err := starlark.Call(th, r.env.Globals()["Worker"], nil, kw)
	if err == nil {
		var init starlark.Value
		if init, err = w.(starlark.HasAttrs).Attr("init"); err == nil {
			_, err = starlark.Call(th, init, nil, nil)
		}
	}
	if err != nil {
		r.printError(fmt.Errorf("making w: %s", starlib.Backtrace(err)))
		return
	}
	r.env.Globals()["w"] = w
	if r.prompts {
		fmt.Fprintf(r.out, "w = %s, ready\n", w)
		if r.flags.mode == "process" {
			fmt.Fprintln(r.out, "process mode: chips load registered functions from files, so load() your kernels, then make a Worker; functions typed here run in thread mode only")
		}
	}
}

// shutdown ends an open run and closes the session: every worker, every
// domain, the host memory.
func (r *repl) shutdown() error {
	var first error
	if r.open != nil {
		first = r.endRun()
	}
	if err := r.s.Close(); err != nil && first == nil {
		first = err
	}
	return first
}

// interrupt is Ctrl-C while a statement runs: cancel its thread. Starlark
// code stops at its next step; tasks already running on chips finish.
func (r *repl) interrupt() {
	r.mu.Lock()
	th := r.running
	r.mu.Unlock()
	if th != nil {
		th.Cancel("interrupted (Ctrl-C)")
	}
}

func (r *repl) setRunning(th *starlark.Thread) {
	r.mu.Lock()
	r.running = th
	r.mu.Unlock()
}

// execute runs one chunk and prints its value or error.
func (r *repl) execute(c *starlib.Chunk) {
	th := r.env.NewThread("repl")
	r.setRunning(th)
	var v starlark.Value
	var err error
	if r.env.Needs(c, "orch") {
		v, err = r.execOrch(th, c)
	} else {
		v, err = r.env.Exec(th, c, nil)
	}
	r.setRunning(nil)
	r.snapshotDomains()
	if err != nil {
		r.printError(err)
		return
	}
	if v != nil && v != starlark.None {
		fmt.Fprintln(r.out, v.String())
	}
}

// worker is the REPL's w, which statements using orch run on.
func (r *repl) worker() (*starlib.Worker, error) {
	w, ok := r.env.Globals()["w"].(*starlib.Worker)
	if !ok || w.Engine().Level() < 3 {
		return nil, fmt.Errorf("RuntimeError: a statement that uses orch runs on w, which must be a Worker of level 3 or more (assign one to w, or :reset)")
	}
	return w, nil
}

// execOrch runs a chunk that uses orch: inside the open run, or as a
// run of its own (submit, then wait for its tasks).
func (r *repl) execOrch(th *starlark.Thread, c *starlib.Chunk) (starlark.Value, error) {
	if r.open != nil {
		return r.open.exec(th, c)
	}
	w, err := r.worker()
	if err != nil {
		return nil, err
	}
	var v starlark.Value
	run, err := w.Engine().Submit(func(o *engine.Orchestrator) (any, error) {
		var err error
		v, err = r.env.Exec(th, c, starlark.StringDict{"orch": r.s.NewOrchestrator(o, w)})
		r.snapshotDomains()
		return v, err
	})
	if err != nil {
		return nil, err
	}
	if err := run.Wait(-1); err != nil {
		return nil, err
	}
	return v, nil
}

// openRun is a run kept open across statements (:begin ... :end). Its
// orchestration function is a loop on its own goroutine that executes
// the statements sent to it.
type openRun struct {
	id    uint64
	stmts chan openStmt
	done  chan struct{}
	err   error // the run's result, once done is closed
}

type openStmt struct {
	th    *starlark.Thread
	c     *starlib.Chunk
	reply chan openReply
}

type openReply struct {
	v   starlark.Value
	err error
}

func (o *openRun) exec(th *starlark.Thread, c *starlib.Chunk) (starlark.Value, error) {
	reply := make(chan openReply, 1)
	select {
	case o.stmts <- openStmt{th, c, reply}:
	case <-o.done:
		return nil, fmt.Errorf("RuntimeError: run %d has ended (%v); :end it", o.id, o.err)
	}
	select {
	case res := <-reply:
		return res.v, res.err
	case <-o.done:
		return nil, fmt.Errorf("RuntimeError: run %d has ended (%v); :end it", o.id, o.err)
	}
}

func (r *repl) beginRun() error {
	if r.open != nil {
		return fmt.Errorf("RuntimeError: run %d is already open; :end it first", r.open.id)
	}
	w, err := r.worker()
	if err != nil {
		return err
	}
	o := &openRun{stmts: make(chan openStmt), done: make(chan struct{})}
	started := make(chan uint64, 1)
	go func() {
		defer close(o.done)
		run, err := w.Engine().Submit(func(eo *engine.Orchestrator) (any, error) {
			orch := r.s.NewOrchestrator(eo, w)
			started <- eo.Run().ID()
			for st := range o.stmts {
				v, err := r.env.Exec(st.th, st.c, starlark.StringDict{"orch": orch})
				r.snapshotDomains()
				st.reply <- openReply{v, err}
			}
			return starlark.None, nil
		})
		if err == nil {
			err = run.Wait(-1)
		}
		o.err = err
	}()
	select {
	case o.id = <-started:
		r.open = o
		fmt.Fprintf(r.out, "run %d open: statements that use orch join it until :end\n", o.id)
		return nil
	case <-o.done:
		return o.err
	}
}

// endRun lets the open run's orchestration return, then waits for its
// fence: every task retired, every domain freed.
func (r *repl) endRun() error {
	o := r.open
	if o == nil {
		return fmt.Errorf("RuntimeError: no run is open (:begin opens one)")
	}
	r.open = nil
	close(o.stmts)
	<-o.done
	r.snapshotDomains()
	if o.err != nil {
		return o.err
	}
	fmt.Fprintf(r.out, "run %d ended\n", o.id)
	return nil
}

// meta runs a meta-command; false means exit.
func (r *repl) meta(cmd string) bool {
	name, rest, _ := strings.Cut(cmd, " ")
	if strings.TrimSpace(rest) != "" {
		r.printError(fmt.Errorf("%s takes no arguments", name))
		return true
	}
	var err error
	switch name {
	case ":help", ":h", ":?":
		fmt.Fprintln(r.out, replHelp)
	case ":quit", ":q", ":exit":
		return false
	case ":domains":
		r.snapshotDomains()
		fmt.Fprint(r.out, r.domainReport())
	case ":workers":
		fmt.Fprint(r.out, r.workerReport())
	case ":begin":
		err = r.beginRun()
	case ":end":
		err = r.endRun()
	case ":reset":
		err = r.shutdown()
		r.start()
	default:
		err = fmt.Errorf("unknown command %s (:help lists them)", name)
	}
	if err != nil {
		r.printError(err)
	}
	return true
}

// printError prints an error with its backtrace, in red on a terminal.
func (r *repl) printError(err error) {
	fmt.Fprintln(r.errOut, r.paint.red(starlib.Backtrace(err)))
}
