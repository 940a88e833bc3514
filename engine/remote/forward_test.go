package remote

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"simpler/engine"
	"simpler/wire"
)

type sentLine struct {
	stream wire.Stream
	line   string
}

// A session's print forwards whole lines only (a line written in pieces
// goes once it ends), escaped, a long one cut saying how much, each also
// passed to the local stream as written; past the bound nothing more
// goes, and one line on stderr says so.
func TestSessionPrintForwardsWholeLines(t *testing.T) {
	var sent []sentLine
	send := func(s wire.Stream, l []byte) { sent = append(sent, sentLine{s, string(l)}) }
	var local bytes.Buffer
	stdout, stderr := newSessionPrints(send, 60, &local, &local)

	stdout.Write([]byte("one\r\ntw"))
	if len(sent) != 1 || sent[0] != (sentLine{wire.StreamStdout, "one"}) {
		t.Fatalf("after a line and a half: %q", sent)
	}
	stdout.Write([]byte("o\x1b[2J\n"))
	stderr.Write([]byte("err\n"))
	want := []sentLine{{wire.StreamStdout, "one"}, {wire.StreamStdout, `two\x1b[2J`}, {wire.StreamStderr, "err"}}
	if len(sent) != 3 || sent[1] != want[1] || sent[2] != want[2] {
		t.Fatalf("sent %q, want %q", sent, want)
	}
	if local.String() != "one\r\ntwo\x1b[2J\nerr\n" {
		t.Errorf("local stream %q", local.String())
	}
	// 4+11+4 = 19 bytes spent, 41 left: a line of 41 and its newline does not fit.
	stdout.Write([]byte(strings.Repeat("y", 41) + "\n"))
	stdout.Write([]byte("z\n"))
	if len(sent) != 4 || sent[3].stream != wire.StreamStderr || !strings.Contains(sent[3].line, "output beyond its bound of 60 bytes") {
		t.Fatalf("past the bound: %q", sent[3:])
	}

	sent = nil
	long, _ := newSessionPrints(send, DefaultOutputBytes, &local, &local)
	long.Write([]byte(strings.Repeat("a", outputLine+10) + "\n"))
	if len(sent) != 1 || sent[0].line != strings.Repeat("a", outputLine)+" [line cut: 10 more bytes]" {
		t.Fatalf("a long line: %.60q... (%d lines)", sent, len(sent))
	}
}

// The parent writes an OUTPUT line whole with its tag, escaping what a
// session left unescaped, and without the tag when told; a malformed
// OUTPUT is an error (the node's connection fails).
func TestPrintedAtTheParent(t *testing.T) {
	var out, errs bytes.Buffer
	SetForwardedOutput(&out, &errs, true)
	defer SetForwardedOutput(osStdout, osStderr, true)
	if err := printed("[rank 3] ", wire.Payload(&wire.Output{Stream: wire.StreamStdout, Line: []byte("hi\x1b")})); err != nil {
		t.Fatal(err)
	}
	if err := printed("[node 1] ", wire.Payload(&wire.Output{Stream: wire.StreamStderr, Line: []byte("oops")})); err != nil {
		t.Fatal(err)
	}
	SetForwardedOutput(&out, &errs, false)
	printed("[node 1] ", wire.Payload(&wire.Output{Stream: wire.StreamStdout, Line: []byte("bare")}))
	if out.String() != "[rank 3] hi\\x1b\nbare\n" || errs.String() != "[node 1] oops\n" {
		t.Errorf("stdout %q, stderr %q", out.String(), errs.String())
	}
	if err := printed("[node 1] ", []byte{9, 0, 0, 0, 0}); err == nil {
		t.Error("an OUTPUT of stream 9 was written")
	}
}

// A task's spans: each chip task the inner worker started and finished
// while it ran, at most MaxSpans of them with the orchestration last;
// nothing is gathered between tasks.
func TestTaskSpans(t *testing.T) {
	var g taskSpans
	at := time.Now()
	g.note(engine.Event{Kind: engine.TaskStarted, Task: 1, At: at}) // before any task: dropped
	g.begin()
	g.named("node_add")
	for i := range wire.MaxSpans + 5 {
		g.note(engine.Event{Kind: engine.TaskStarted, Run: 1, Task: i, Worker: "chip_worker 0 (device 0)", Callable: "add", At: at})
		g.note(engine.Event{Kind: engine.TaskFinished, Run: 1, Task: i, Worker: "chip_worker 0 (device 0)", Callable: "add", At: at.Add(time.Millisecond)})
	}
	g.note(engine.Event{Kind: engine.TaskFinished, Run: 1, Task: 999, At: at}) // never started: dropped
	took, spans := g.end()
	if len(spans) != wire.MaxSpans || took <= 0 {
		t.Fatalf("%d spans, took %d", len(spans), took)
	}
	if s := spans[0]; s.Lane != "chip_worker 0 (device 0)" || s.Callable != "add" || s.Dur != int64(time.Millisecond) {
		t.Errorf("first span %+v", s)
	}
	if s := spans[len(spans)-1]; s.Lane != "orchestration" || s.Callable != "node_add" || s.Start != 0 || s.Dur != took {
		t.Errorf("last span %+v", s)
	}
	g.note(engine.Event{Kind: engine.TaskStarted, Task: 1, At: at}) // after the task: dropped
	g.begin()
	if _, spans := g.end(); len(spans) != 0 {
		t.Errorf("a task that ran nothing has spans %+v", spans)
	}
}
