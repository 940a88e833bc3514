package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/chzyer/readline"
	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/starlib"
)

const replUsage = "usage: simpler repl [--platform P] [--devices 0-3] [--mode thread|process] [--sub-workers N]"

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

// lineReader reads one line of input; io.EOF ends the session and
// readline.ErrInterrupt abandons the line (Ctrl-C).
type lineReader interface {
	readLine(prompt string) (string, error)
	close()
}

// openInput uses readline on a terminal, and plain lines otherwise
// (piped input: no prompts, no history).
func (r *repl) openInput(stdin io.Reader, stdout, stderr io.Writer) error {
	r.out, r.errOut = stdout, stderr
	r.paint = painter{on: colorable(stderr)}
	fin, inOK := stdin.(*os.File)
	fout, outOK := stdout.(*os.File)
	if !inOK || !outOK || !isTerminal(int(fin.Fd())) || !isTerminal(int(fout.Fd())) {
		r.in = &plainReader{sc: bufio.NewScanner(stdin)}
		return nil
	}
	rl, err := readline.NewEx(&readline.Config{
		Prompt:            ">>> ",
		HistoryFile:       historyFile(),
		HistorySearchFold: true,
		AutoComplete:      completer{r},
		Stdin:             fin,
		Stdout:            fout,
		Stderr:            stderr,
		FuncGetWidth: func() int { // a terminal that reports no size still completes
			if w := readline.GetScreenWidth(); w > 0 {
				return w
			}
			return 80
		},
	})
	if err != nil {
		return err
	}
	in := &readlineReader{rl: rl}
	r.in = in
	r.out = promptWriter{in, fout, rl.Stdout()}
	r.errOut = promptWriter{in, stderr, rl.Stderr()}
	r.prompts = true
	return nil
}

// promptWriter writes through readline while a prompt is showing (so that
// output from tasks running in the background redraws the line being
// typed), and straight to the terminal while a statement runs.
type promptWriter struct {
	in       *readlineReader
	direct   io.Writer
	prompted io.Writer
}

func (w promptWriter) Write(b []byte) (int, error) {
	if w.in.reading.Load() {
		return w.prompted.Write(b)
	}
	return w.direct.Write(b)
}

// historyFile is $XDG_STATE_HOME/simpler/history, else ~/.simpler_history.
func historyFile() string {
	if dir := os.Getenv("XDG_STATE_HOME"); dir != "" {
		dir = filepath.Join(dir, "simpler")
		if err := os.MkdirAll(dir, 0o700); err == nil {
			return filepath.Join(dir, "history")
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".simpler_history")
	}
	return ""
}

type readlineReader struct {
	rl      *readline.Instance
	reading atomic.Bool // a prompt is showing
}

func (l *readlineReader) readLine(prompt string) (string, error) {
	l.rl.SetPrompt(prompt)
	l.reading.Store(true)
	defer l.reading.Store(false)
	return l.rl.Readline()
}

func (l *readlineReader) close() { l.rl.Close() }

type plainReader struct{ sc *bufio.Scanner }

func (l *plainReader) readLine(string) (string, error) {
	if !l.sc.Scan() {
		if err := l.sc.Err(); err != nil {
			return "", err
		}
		return "", io.EOF
	}
	return l.sc.Text(), nil
}

func (l *plainReader) close() {}

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

// observe is the session's OnWorker hook: it tracks every engine Worker
// and the domain events it reports.
func (r *repl) observe(w *engine.Worker) {
	r.mu.Lock()
	rw := &replWorker{index: len(r.workers) + 1, w: w}
	r.workers = append(r.workers, rw)
	r.mu.Unlock()
	w.Observe(func(e engine.Event) {
		switch e.Kind {
		case engine.DomainAllocated, engine.DomainReleased, engine.DomainFreed:
		default:
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		key := domainKey{rw.index, e.AllocID}
		d := r.domains[key]
		if d == nil {
			d = &domainRec{worker: rw, name: e.Domain, allocID: e.AllocID, run: e.Run}
			r.domains[key] = d
		}
		switch e.Kind {
		case engine.DomainAllocated:
			d.state = "live"
		case engine.DomainReleased:
			d.state = "released"
		case engine.DomainFreed:
			d.state = "freed"
			d.err = e.Err
		}
	})
}

type domainKey struct {
	worker  int
	allocID uint64
}

// domainRec is what the REPL knows of a domain: its state from the
// events, and its layout from w.live_domains while it was live.
type domainRec struct {
	worker  *replWorker
	name    string
	allocID uint64
	run     uint64
	state   string
	err     error
	layout  *domainLayout
}

type domainLayout struct {
	workers []int
	window  int
	buffers []engine.BufferSpec
	offsets []int
	ranks   []*engine.RankView
}

// snapshotDomains records the layout of every live domain not seen yet.
// It asks the workers without holding r.mu: their observers take r.mu
// while holding the worker's lock.
func (r *repl) snapshotDomains() {
	r.mu.Lock()
	workers := append([]*replWorker(nil), r.workers...)
	r.mu.Unlock()
	type found struct {
		key    domainKey
		name   string
		layout *domainLayout
	}
	var all []found
	for _, rw := range workers {
		for name, d := range rw.w.LiveDomains() {
			key := domainKey{rw.index, d.AllocationID()}
			r.mu.Lock()
			rec := r.domains[key]
			known := rec != nil && rec.layout != nil
			r.mu.Unlock()
			if known {
				continue
			}
			l := &domainLayout{workers: d.Workers()}
			l.buffers, l.offsets = d.Buffers()
			for _, id := range l.workers {
				v, err := d.Rank(id)
				if err != nil {
					l = nil // released meanwhile
					break
				}
				l.window = v.WindowSize
				l.ranks = append(l.ranks, v)
			}
			if l != nil {
				all = append(all, found{key, name, l})
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range all {
		rec := r.domains[f.key]
		if rec == nil { // allocated before the observer was attached: cannot happen, but be safe
			continue
		}
		rec.layout = f.layout
	}
}

// domainReport describes every domain seen, oldest first per worker.
func (r *repl) domainReport() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	recs := make([]*domainRec, 0, len(r.domains))
	for _, d := range r.domains {
		recs = append(recs, d)
	}
	if len(recs) == 0 {
		return "no domains yet (a statement using orch.allocate_domain makes one)\n"
	}
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].worker.index != recs[j].worker.index {
			return recs[i].worker.index < recs[j].worker.index
		}
		return recs[i].allocID < recs[j].allocID
	})
	var b strings.Builder
	for _, d := range recs {
		fmt.Fprintf(&b, "%q  %s  (Worker %d, allocation %d, run %d)\n", d.name, d.state, d.worker.index, d.allocID, d.run)
		if d.err != nil {
			fmt.Fprintf(&b, "  free failed: %v\n", d.err)
		}
		l := d.layout
		switch {
		case d.state == "freed":
			continue // its windows are gone: the header is enough
		case l == nil:
			b.WriteString("  (layout not seen: the domain was released before the prompt returned)\n")
			continue
		}
		devs := d.worker.w.Config().DeviceIDs
		fmt.Fprintf(&b, "  workers %s, window %d bytes\n", starlark.NewList(intValues(l.workers)), l.window)
		for _, v := range l.ranks {
			dev := -1
			if v.Worker < len(devs) {
				dev = devs[v.Worker]
			}
			fmt.Fprintf(&b, "  rank %d: chip_worker %d (device %d)  window base %#x  device_ctx %#x\n", v.Rank, v.Worker, dev, v.WindowBase, v.DeviceCtx)
			for i, spec := range l.buffers {
				fmt.Fprintf(&b, "    buffer %-10s %#x  +%d  %d bytes (%d × %s)\n", spec.Name, v.BufferPtrs[spec.Name], l.offsets[i], spec.NBytes, spec.Count, spec.DType)
			}
		}
	}
	return b.String()
}

// workerReport draws the tree of the session's workers.
func (r *repl) workerReport() string {
	r.mu.Lock()
	workers := append([]*replWorker(nil), r.workers...)
	r.mu.Unlock()
	if len(workers) == 0 {
		return "no workers (w could not be made; Worker(...) makes one)\n"
	}
	names := map[*engine.Worker][]string{}
	for name, v := range r.env.Globals() {
		if w, ok := v.(*starlib.Worker); ok {
			names[w.Engine()] = append(names[w.Engine()], name)
		}
	}
	index := map[*engine.Worker]int{}
	child := map[*engine.Worker]bool{}
	for _, rw := range workers {
		index[rw.w] = rw.index
		for _, c := range rw.w.Children() {
			child[c] = true
		}
	}
	var b strings.Builder
	var draw func(w *engine.Worker, indent, label string)
	draw = func(w *engine.Worker, indent, label string) {
		cfg := w.Config()
		title := label
		if i, ok := index[w]; ok {
			title += fmt.Sprintf("Worker %d", i)
		} else {
			title += "Worker"
		}
		if n := names[w]; len(n) > 0 {
			sort.Strings(n)
			title += " (" + strings.Join(n, ", ") + ")"
		}
		platform := "?"
		if cfg.Platform != nil {
			platform = cfg.Platform.Name()
		}
		fmt.Fprintf(&b, "%s%s: level %d, platform %s, mode %s\n", indent, title, cfg.Level, platform, cfg.Mode)
		if cfg.Level <= 3 {
			for i, id := range cfg.DeviceIDs {
				fmt.Fprintf(&b, "%s  chip_worker %d: device %d\n", indent, i, id)
			}
		}
		for i := 0; i < cfg.NumSubWorkers; i++ {
			fmt.Fprintf(&b, "%s  sub_worker %d\n", indent, i)
		}
		for i, c := range w.Children() {
			draw(c, indent+"  ", fmt.Sprintf("child_worker %d: ", i))
		}
	}
	for _, rw := range workers {
		if !child[rw.w] {
			draw(rw.w, "", "")
		}
	}
	return b.String()
}

// completer completes globals, attributes and meta-commands.
type completer struct{ r *repl }

func (c completer) Do(line []rune, pos int) ([][]rune, int) {
	cands, n := complete(c.r.env.Globals(), string(line[:pos]))
	out := make([][]rune, len(cands))
	for i, s := range cands {
		out[i] = []rune(s)
	}
	return out, n
}

// complete returns the completions of the text before the cursor, as
// suffixes to insert, and the length of the word being completed.
func complete(globals starlark.StringDict, before string) ([]string, int) {
	if trimmed := strings.TrimLeft(before, " \t"); strings.HasPrefix(trimmed, ":") && !strings.ContainsAny(trimmed, " \t") {
		return withPrefix(metaCommands, trimmed), len(trimmed)
	}
	i := len(before)
	for i > 0 && (isIdentByte(before[i-1]) || before[i-1] == '.') {
		i--
	}
	word := before[i:]
	if word != "" && (word[0] == '.' || (word[0] >= '0' && word[0] <= '9')) {
		return nil, 0
	}
	parts := strings.Split(word, ".")
	partial := parts[len(parts)-1]
	var names []string
	if len(parts) == 1 {
		for name := range globals {
			names = append(names, name)
		}
		for name := range starlark.Universe {
			if _, shadowed := globals[name]; !shadowed {
				names = append(names, name)
			}
		}
		names = append(names, "def", "for", "if", "load", "return", "while", "lambda", "pass", "break", "continue")
	} else {
		v, ok := globals[parts[0]]
		if !ok {
			v, ok = starlark.Universe[parts[0]]
		}
		if !ok {
			return nil, 0
		}
		for _, attr := range parts[1 : len(parts)-1] {
			ha, ok := v.(starlark.HasAttrs)
			if !ok {
				return nil, 0
			}
			next, err := ha.Attr(attr)
			if err != nil || next == nil {
				return nil, 0
			}
			v = next
		}
		ha, ok := v.(starlark.HasAttrs)
		if !ok {
			return nil, 0
		}
		names = ha.AttrNames()
	}
	return withPrefix(names, partial), len(partial)
}

// withPrefix returns the sorted, distinct names that start with prefix,
// minus the prefix.
func withPrefix(names []string, prefix string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		if !strings.HasPrefix(n, prefix) || seen[n] {
			continue
		}
		if strings.HasPrefix(n, "_") && !strings.HasPrefix(prefix, "_") {
			continue // private names only when asked for
		}
		seen[n] = true
		out = append(out, n[len(prefix):])
	}
	sort.Strings(out)
	return out
}

func intValues(xs []int) []starlark.Value {
	out := make([]starlark.Value, len(xs))
	for i, x := range xs {
		out[i] = starlark.MakeInt(x)
	}
	return out
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
