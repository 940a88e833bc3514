package remote

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"simpler/engine"
	"simpler/wire"
)

// What a remote node's code prints reaches the level-4 process. A
// session's Starlark print goes through a sessionPrint: each whole line is
// sent to the parent as an OUTPUT frame, on the connection its tasks'
// COMPLETIONs take, so the lines a task printed arrive before the task is
// reported done; and it still goes to the session's own stream, which its
// daemon reads, tags and bounds (output.go). The parent writes each line
// whole, in one Write, tagged with the node ("[node 1] ") or the rank of
// a worker group ("[rank 0] "), to the stdout or stderr set by
// SetForwardedOutput; lines of several nodes never interleave mid-line.
// A session forwards at most DefaultOutputBytes; past that one line says
// the rest is on the daemon's output only. A daemon's own log lines never
// reach the parent: only the session's code prints through here.

// sessionPrint is one stream of a session's code's print.
type sessionPrint struct {
	stream wire.Stream
	local  io.Writer // the session process's own stream (its daemon reads it)
	budget *printBudget

	mu      sync.Mutex
	partial []byte // the line being gathered, at most outputLine bytes
	cut     int    // bytes of it beyond outputLine
}

// printBudget is what a session may still forward, shared by its streams.
type printBudget struct {
	mu     sync.Mutex
	left   uint64
	bound  uint64
	noted  bool // the note that the bound was reached has been sent
	sendFn func(wire.Stream, []byte)
}

// take counts n bytes against the bound; once they do not fit nothing
// more is forwarded, and the first refusal says so (noted).
func (b *printBudget) take(n int) (ok, note bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if uint64(n) <= b.left {
		b.left -= uint64(n)
		return true, false
	}
	b.left = 0
	note, b.noted = !b.noted, true
	return false, note
}

// newSessionPrints are a session's stdout and stderr for its code, each
// forwarding to the parent through send, bounded together by bound.
func newSessionPrints(send func(wire.Stream, []byte), bound uint64, stdout, stderr io.Writer) (*sessionPrint, *sessionPrint) {
	b := &printBudget{left: bound, bound: bound, sendFn: send}
	return &sessionPrint{stream: wire.StreamStdout, local: stdout, budget: b},
		&sessionPrint{stream: wire.StreamStderr, local: stderr, budget: b}
}

// Write passes p on to the local stream and forwards each line it
// completes.
func (p *sessionPrint) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.local.Write(b)
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		room := outputLine - len(p.partial)
		if len(chunk) > room {
			p.cut += len(chunk) - room
			chunk = chunk[:room]
		}
		p.partial = append(p.partial, chunk...)
		if i < 0 {
			break
		}
		p.forward(trimCR(p.partial), p.cut)
		p.partial, p.cut = p.partial[:0], 0
		b = b[i+1:]
	}
	return n, nil
}

// forward sends one line, escaped and with a note of what was cut, when
// the budget has room for it.
func (p *sessionPrint) forward(line []byte, cut int) {
	out := tagLine("", line, cut)
	out = out[:len(out)-1] // the newline: OUTPUT carries a line without it
	ok, note := p.budget.take(len(out) + 1)
	if ok {
		p.budget.sendFn(p.stream, out)
		return
	}
	if note {
		p.budget.sendFn(wire.StreamStderr, fmt.Appendf(nil, "output beyond its bound of %d bytes: the rest is on the daemon's output only", p.budget.bound))
	}
}

// sendOutput writes one OUTPUT frame to the parent. A failed write has
// ended the session already (failWrite); print goes on locally.
func (s *session) sendOutput(stream wire.Stream, line []byte) {
	s.write(wire.TypeOutput, 0, &wire.Output{Stream: stream, Line: line})
}

// outputSetter is a resolver whose code's print can be redirected
// (starlib's).
type outputSetter interface {
	SetOutput(stdout, stderr io.Writer)
}

// forwardPrints makes r's code print through the session to the parent.
func (s *session) forwardPrints(r any) {
	o, ok := r.(outputSetter)
	if !ok {
		return
	}
	o.SetOutput(s.stdout, s.stderr)
}

// osStdout and osStderr are the default destinations (a test restores
// them).
var osStdout, osStderr io.Writer = os.Stdout, os.Stderr

// forwardTo is where the parent writes the lines its nodes print.
var forwardTo = struct {
	mu             sync.Mutex
	stdout, stderr io.Writer
	tags           bool
}{stdout: osStdout, stderr: osStderr, tags: true}

// SetForwardedOutput says where the lines remote nodes print go in this
// process, and whether each is tagged with its node or rank (simpler run
// --no-tag-output drops the tags).
func SetForwardedOutput(stdout, stderr io.Writer, tags bool) {
	forwardTo.mu.Lock()
	defer forwardTo.mu.Unlock()
	forwardTo.stdout, forwardTo.stderr, forwardTo.tags = stdout, stderr, tags
}

// printed writes the line of an OUTPUT frame, whole, tagged with tag. The
// session escaped it; it is escaped again here, for a session that did
// not (escaping escaped text changes nothing).
func printed(tag string, payload []byte) error {
	o, err := wire.DecodeOutput(payload)
	if err != nil {
		return err
	}
	forwardTo.mu.Lock()
	defer forwardTo.mu.Unlock()
	if !forwardTo.tags {
		tag = ""
	}
	w := forwardTo.stdout
	if o.Stream == wire.StreamStderr {
		w = forwardTo.stderr
	}
	w.Write(tagLine(tag, o.Line, 0))
	return nil
}

// taskSpans gathers what a session's inner worker does for the task
// running now (its chip tasks), reported with the task's COMPLETION so
// that the parent's trace shows the node's work on a track of its own.
// Tasks run one after another, so one gathering at a time.
type taskSpans struct {
	mu    sync.Mutex
	start time.Time
	orch  string // the task's callable, once known
	spans []wire.Span
	open  map[spanKey]time.Time // started and not finished
}

type spanKey struct {
	run          uint64
	task, member int
}

// begin starts gathering for a task starting now.
func (g *taskSpans) begin() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.start, g.orch, g.spans, g.open = time.Now(), "", nil, map[spanKey]time.Time{}
}

// named records the task's callable: its orchestration is a span too.
func (g *taskSpans) named(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.orch = name
}

// note is the inner worker's observer.
func (g *taskSpans) note(e engine.Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == nil {
		return // no task running (the worker's own start-up)
	}
	k := spanKey{e.Run, e.Task, e.Member}
	switch e.Kind {
	case engine.TaskStarted:
		g.open[k] = e.At
	case engine.TaskFinished:
		at, ok := g.open[k]
		delete(g.open, k)
		if ok && len(g.spans) < wire.MaxSpans {
			g.spans = append(g.spans, wire.Span{Lane: cutName(e.Worker), Callable: cutName(e.Callable),
				Start: max(0, at.Sub(g.start).Nanoseconds()), Dur: max(0, e.At.Sub(at).Nanoseconds())})
		}
	}
}

// end stops gathering and gives the task's time and spans.
func (g *taskSpans) end() (took int64, spans []wire.Span) {
	g.mu.Lock()
	defer g.mu.Unlock()
	took, spans = time.Since(g.start).Nanoseconds(), g.spans
	if g.orch != "" {
		if len(spans) == wire.MaxSpans {
			spans = spans[:wire.MaxSpans-1]
		}
		spans = append(spans, wire.Span{Lane: "orchestration", Callable: cutName(g.orch), Start: 0, Dur: took})
	}
	g.spans, g.open = nil, nil
	return took, spans
}

// cutName bounds a span's name to what a COMPLETION carries.
func cutName(s string) string {
	if len(s) > wire.MaxSpanName {
		return s[:wire.MaxSpanName]
	}
	return s
}

// reportSpans passes a COMPLETION's spans to the Worker's observer: each
// placed so that it ends as long before now as it ended before the task
// did on the node (the node's clock is not this host's).
func (n *node) reportSpans(c wire.Completion) {
	if n.events == nil {
		return
	}
	for _, sp := range c.Spans {
		ago := max(0, c.Took-sp.Start-sp.Dur)
		n.events(engine.Event{Kind: engine.RemoteSpan, Node: n.name, Lane: sp.Lane, Callable: sp.Callable,
			Dur: time.Duration(sp.Dur), Ago: time.Duration(ago)})
	}
}

// copyNames are the commands reported as copies in traces.
var copyNames = map[wire.Command]string{wire.CmdCopyTo: "remote_copy_to", wire.CmdCopyFrom: "remote_copy_from"}

// reportCopy passes a copy that took since start to the observer.
func (n *node) reportCopy(c *wire.Control, bulk, sink []byte, start time.Time) {
	name, ok := copyNames[c.Cmd]
	if n.events == nil || !ok {
		return
	}
	bytes := uint64(len(bulk))
	if c.Cmd == wire.CmdCopyFrom {
		bytes = c.NBytes
	}
	n.events(engine.Event{Kind: engine.RemoteCopy, Worker: n.name, Callable: name, Bytes: bytes, Dur: time.Since(start)})
}
