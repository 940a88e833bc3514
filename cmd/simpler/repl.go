package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"

	"github.com/chzyer/readline"
	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/starlib"
)

// registerReplFlags registers the flags of simpler repl on fs.
func registerReplFlags(fs *flag.FlagSet) (*runFlags, *int) {
	f := new(runFlags)
	f.register(fs)
	return f, fs.Int("sub-workers", 1, "`N` SUB workers of w")
}

// replIntro is the first part of :help; the commands follow, from
// metaCommands, then replKeys.
const replIntro = `Type Starlark statements; an expression's value is printed.
A line ending in ':' or with open brackets continues; a blank line ends a block.

  w          a level-3 Worker built from the flags, already init()ed
  orch       a statement that uses orch runs as a run of its own on w:
               t = orch.alloc([4], FLOAT32)
               d = orch.allocate_domain(name="ring", window_size=4096)
             (a domain is freed at its run's fence: use :begin to keep
             one run open across statements)
`

const replKeys = `Tab completes names and attributes (w.reg<TAB>, orch.<TAB>); Ctrl-R searches
history; Ctrl-C cancels the running statement and the runs it started (a
second Ctrl-C cancels every run), or the line being typed.`

// metaCommand is a command typed after ':'. Every command is in
// metaCommands, which :help lists, completion offers and meta dispatches
// from, so that none can be missing from one of them.
type metaCommand struct {
	name    string
	aliases []string
	help    string
	run     func(r *repl) error // nil for :help and :quit, which meta handles
}

var metaCommands = []metaCommand{
	{name: ":begin", help: "open a run on w; statements that use orch join it until :end", run: (*repl).beginRun},
	{name: ":end", help: "end the open run: wait for its tasks, free its domains", run: (*repl).endRun},
	{name: ":domains", help: "every domain seen: live / released / freed, ranks, windows, buffers", run: func(r *repl) error {
		r.snapshotDomains()
		fmt.Fprint(r.out, r.domainReport())
		return nil
	}},
	{name: ":workers", help: "the worker tree: levels, platforms, chips, SUB workers", run: func(r *repl) error {
		fmt.Fprint(r.out, r.workerReport())
		return nil
	}},
	{name: ":reset", help: "close every worker and start a fresh session", run: func(r *repl) error {
		err := r.shutdown()
		r.endRace() // the fresh session gets a fresh detector
		r.start()
		return err
	}},
	{name: ":help", aliases: []string{":h", ":?"}, help: "this text"},
	{name: ":quit", aliases: []string{":q", ":exit"}, help: "exit (so does Ctrl-D)"},
}

// replHelp is the text of :help.
func replHelp() string {
	var b strings.Builder
	b.WriteString(replIntro)
	b.WriteString("\n")
	for _, c := range metaCommands {
		names := strings.Join(append([]string{c.name}, c.aliases...), ", ")
		fmt.Fprintf(&b, "  %-17s %s\n", names, c.help)
	}
	b.WriteString("\n")
	b.WriteString(replKeys)
	return b.String()
}

// lookupMeta finds a command by its name or an alias.
func lookupMeta(name string) (metaCommand, bool) {
	for _, c := range metaCommands {
		if c.name == name || slices.Contains(c.aliases, name) {
			return c, true
		}
	}
	return metaCommand{}, false
}

// cmdRepl runs the interactive shell.
func cmdRepl(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flagSet("repl")
	f, subs := registerReplFlags(fs)
	if code, ok := parseFlags("repl", fs, args, nil, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "repl", "takes no arguments, got %q", fs.Args())
	}
	devices, err := f.check()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	r := &repl{flags: *f, devices: devices, subs: *subs}
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
	runs    map[runKey]*runRec // runs in progress, from their events
	stmt    *statement         // the statement being executed, for Ctrl-C

	interrupting sync.WaitGroup // Ctrl-Cs still cancelling

	seq    int      // statements begun
	open   *openRun // :begin ... :end
	failed bool     // a statement failed: piped input exits 1
	raced  bool     // --race found something in a session so far: exit 66
}

// replWorker is an engine Worker the session made.
type replWorker struct {
	index int
	w     *engine.Worker
}

// loop reads and runs chunks until EOF or :quit.
func (r *repl) loop() int {
	stopSigs := r.watchSIGINT()
	defer func() {
		stopSigs()
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
	err := r.shutdown()
	r.endRace()
	if err != nil {
		r.printError(err)
		return 1
	}
	if r.failed && !r.prompts {
		return 1 // a replayed session that failed fails, as a script would
	}
	if r.raced {
		return exitRace // as simpler run: a race found is a failure of its own
	}
	return 0
}

// endRace prints what the session's detector (--race) found, once its
// session is closed and nothing runs any more: the summary simpler run
// prints at a script's end. Each report itself was printed as its race
// happened, so it follows the statement that made it.
func (r *repl) endRace() {
	if r.s != nil && raceSummary(r.s, r.errOut) {
		r.raced = true
	}
}

// watchSIGINT makes SIGINT interrupt the running statement (Ctrl-C from
// a terminal comes as a key instead: see repl_input.go) until stop.
func (r *repl) watchSIGINT() (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case <-sigs:
				r.interrupt()
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
		<-ended
	}
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
	r.runs = map[runKey]*runRec{}
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

// execute runs one chunk and prints its value or error.
func (r *repl) execute(c *starlib.Chunk) {
	th := r.env.NewThread("repl")
	st := r.begin(th)
	stop := r.in.watch(r.interrupt)
	var v starlark.Value
	var err error
	if r.env.Needs(c, "orch") {
		v, err = r.execOrch(st, c)
	} else {
		v, err = r.env.Exec(th, c, nil)
	}
	stop()
	interrupted := r.end(st)
	r.snapshotDomains()
	switch {
	case interrupted && (err != nil || len(st.cancelled) > 0):
		// The statement's error is what cancelling it made: the line
		// says what was cancelled instead.
		r.failed = true
		fmt.Fprintln(r.errOut, r.cancelLine(st, err))
	case err != nil:
		r.printError(err)
	case v != nil && v != starlark.None:
		fmt.Fprintln(r.out, v.String())
	}
}

// runCommand runs a meta-command as a statement, so that Ctrl-C while
// :end waits cancels the open run. The others have no run to cancel and
// finish.
func (r *repl) runCommand(c metaCommand) error {
	st := r.begin(nil)
	if c.name == ":end" && r.open != nil {
		r.setRun(st, r.open.run, r.open.worker)
	}
	stop := r.in.watch(r.interrupt)
	err := c.run(r)
	stop()
	if r.end(st) && len(st.cancelled) > 0 {
		r.failed = true
		fmt.Fprintln(r.errOut, r.cancelLine(st, nil))
		return nil
	}
	return err
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
func (r *repl) execOrch(st *statement, c *starlib.Chunk) (starlark.Value, error) {
	if r.open != nil {
		return r.open.exec(st.th, c)
	}
	w, err := r.worker()
	if err != nil {
		return nil, err
	}
	var v starlark.Value
	run, err := w.Engine().Submit(func(o *engine.Orchestrator) (any, error) {
		r.setRun(st, o.Run(), w.Engine())
		var err error
		v, err = r.env.Exec(st.th, c, starlark.StringDict{"orch": r.s.NewOrchestrator(o, w)})
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
	id     uint64
	run    *engine.Run
	worker *engine.Worker
	stmts  chan openStmt
	done   chan struct{}
	err    error // the run's result, once done is closed
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
	o := &openRun{worker: w.Engine(), stmts: make(chan openStmt), done: make(chan struct{})}
	started := make(chan *engine.Run, 1)
	go func() {
		defer close(o.done)
		run, err := w.Engine().Submit(func(eo *engine.Orchestrator) (any, error) {
			orch := r.s.NewOrchestrator(eo, w)
			started <- eo.Run()
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
	case o.run = <-started:
		o.id = o.run.ID()
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
	c, ok := lookupMeta(name)
	var err error
	switch {
	case !ok:
		err = fmt.Errorf("unknown command %s (:help lists them)", name)
	case strings.TrimSpace(rest) != "":
		err = fmt.Errorf("%s takes no arguments", name)
	case c.name == ":quit":
		return false
	case c.name == ":help":
		fmt.Fprintln(r.out, replHelp())
	default:
		err = r.runCommand(c)
	}
	if err != nil {
		r.printError(err)
	}
	return true
}

// printError prints an error with its backtrace, in red on a terminal:
// with the source line and a caret, as simpler run prints it, when the
// session holds the source.
func (r *repl) printError(err error) {
	r.failed = true
	text := starlib.Backtrace(err)
	if r.s != nil {
		text = r.s.Backtrace(err)
	}
	fmt.Fprintln(r.errOut, r.paint.red(text))
}
