package remote

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// A session process's stdout and stderr are pipes its daemon reads, never
// the daemon's own output: a session runs code its parent sent, and what
// that code prints must not pass for the daemon's log, nor flood it. Each
// complete line a session writes reaches the daemon's output as one write
// of its own, prefixed with the session's tag ("[session 0123abcd...] ");
// control characters in it are escaped (a carriage return cannot move the
// cursor back over the tag); a line longer than outputLine bytes is cut,
// saying how much; and once a session has passed on its bound of bytes,
// the rest is dropped and one line at its end says how much.
//
// Lines go to a lineSink, so output can later go elsewhere too (to the
// session's parent) without changing how it is read.

// outputLine is the longest line passed on whole; the rest of a longer
// line is cut.
const outputLine = 2048

// DefaultOutputBytes bounds the bytes of lines one session passes to its
// daemon's output unless the daemon is told otherwise.
const DefaultOutputBytes = 1 << 20

// outputGrace is how long a session's output may stay open after its
// process has ended (a child of it may still hold the pipe).
const outputGrace = time.Second

// lineSink writes whole lines to w, one Write each, so that lines of
// different sessions (and of the daemon, which writes its own lines with
// one Write each) never interleave mid-line.
type lineSink struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *lineSink) writeLine(line []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.Write(line)
}

// sessionOutput reads one session process's stdout and stderr.
type sessionOutput struct {
	tag     string // "[session 0123abcd...] "
	stderr  *lineSink
	readers []*os.File // the daemon's ends of the pipes
	copied  sync.WaitGroup

	mu      sync.Mutex
	left    uint64 // bytes the session may still pass on
	bound   uint64
	dropped uint64 // bytes dropped beyond the bound
}

// newSessionOutput makes the pipes of a session tagged with session id
// session: it returns the ends the process is started with (its stdout
// and stderr), which the caller closes once the process has them. Lines
// of the session's stdout go to stdout, those of its stderr to stderr.
func newSessionOutput(session uint64, bound uint64, stdout, stderr *lineSink) (*sessionOutput, *os.File, *os.File, error) {
	o := &sessionOutput{tag: fmt.Sprintf("[session %016x] ", session), stderr: stderr, left: bound, bound: bound}
	var theirs []*os.File
	for _, sink := range []*lineSink{stdout, stderr} {
		r, w, err := os.Pipe()
		if err != nil {
			o.closeAll(theirs)
			o.closeAll(o.readers)
			o.copied.Wait()
			return nil, nil, nil, err
		}
		o.readers = append(o.readers, r)
		theirs = append(theirs, w)
		o.copied.Add(1)
		go o.copy(r, sink)
	}
	return o, theirs[0], theirs[1], nil
}

func (o *sessionOutput) closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// copy passes the lines read from r to sink until r ends.
func (o *sessionOutput) copy(r *os.File, sink *lineSink) {
	defer o.copied.Done()
	var lr lineReader
	lr.r = r
	for {
		line, cut, err := lr.next()
		if len(line) > 0 || cut > 0 || err == nil {
			o.pass(line, cut, sink)
		}
		if err != nil {
			return
		}
	}
}

// pass writes one line to sink, when the session's bound has room for
// all the daemon writes of it (the tag, the escapes and the newline
// count). Once a line did not fit, every later one is dropped.
func (o *sessionOutput) pass(line []byte, cut int, sink *lineSink) {
	raw := len(line) + cut + 1
	if o.spent() {
		o.drop(raw)
		return
	}
	out := tagLine(o.tag, line, cut)
	if !o.take(len(out)) {
		o.drop(raw)
		return
	}
	sink.writeLine(out)
}

func (o *sessionOutput) spent() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.left == 0
}

// take counts n bytes against the bound, or spends it when they do not
// fit.
func (o *sessionOutput) take(n int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if uint64(n) > o.left {
		o.left = 0
		return false
	}
	o.left -= uint64(n)
	return true
}

func (o *sessionOutput) drop(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dropped += uint64(n)
}

// finish is called once the session's process has exited: it waits for
// the rest of its output, at most grace (a child of the process may hold
// a pipe open), closes the pipes and says how much was dropped.
func (o *sessionOutput) finish(grace time.Duration) {
	done := make(chan struct{})
	go func() {
		o.copied.Wait()
		close(done)
	}()
	t := time.NewTimer(grace)
	select {
	case <-done:
	case <-t.C:
	}
	t.Stop()
	o.closeAll(o.readers) // a reader still blocked ends now
	<-done
	o.mu.Lock()
	dropped := o.dropped
	o.mu.Unlock()
	if dropped > 0 {
		o.stderr.writeLine([]byte(fmt.Sprintf("%soutput beyond its bound of %d bytes (--max-output-bytes): %d bytes dropped\n", o.tag, o.bound, dropped)))
	}
}

// tagLine is line as the daemon writes it: the tag, the line with its
// control characters escaped, a note of what was cut, and a newline.
func tagLine(tag string, line []byte, cut int) []byte {
	out := make([]byte, 0, len(tag)+len(line)+32)
	out = append(out, tag...)
	out = appendEscaped(out, line)
	if cut > 0 {
		out = append(out, " [line cut: "...)
		out = strconv.AppendInt(out, int64(cut), 10)
		out = append(out, " more bytes]"...)
	}
	return append(out, '\n')
}

// appendEscaped appends line to out with every control character, every
// invisible direction override and every byte that is not UTF-8 written
// as an escape (\x1b, \u202e): nothing a session prints can move the
// cursor or reorder what a terminal shows. A tab stays.
func appendEscaped(out, line []byte) []byte {
	for len(line) > 0 {
		r, n := utf8.DecodeRune(line)
		switch {
		case r == utf8.RuneError && n == 1:
			out = fmt.Appendf(out, `\x%02x`, line[0])
		case r == '\t':
			out = append(out, '\t')
		case r < 0x80 && unicode.IsControl(r):
			out = fmt.Appendf(out, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, line[:n]...)
		}
		line = line[n:]
	}
	return out
}

// lineReader splits what it reads into lines of at most outputLine bytes
// (without their newline, and without a carriage return before it).
type lineReader struct {
	r    io.Reader
	buf  [32 << 10]byte
	data []byte // read and not yet returned
	line []byte // the line being gathered
	eof  error
}

// next returns the next line and how many bytes of it were cut; err is
// set once r has ended, with the last unfinished line (if any).
func (l *lineReader) next() (line []byte, cut int, err error) {
	l.line = l.line[:0]
	for {
		if len(l.data) == 0 {
			if l.eof != nil {
				return trimCR(l.line), cut, l.eof
			}
			n, err := l.r.Read(l.buf[:])
			l.data = l.buf[:n]
			if err != nil {
				l.eof = err
			}
			continue
		}
		i := bytes.IndexByte(l.data, '\n')
		chunk := l.data
		if i >= 0 {
			chunk = l.data[:i]
		}
		room := outputLine - len(l.line)
		if len(chunk) > room {
			cut += len(chunk) - room
			chunk = chunk[:room]
		}
		l.line = append(l.line, chunk...)
		if i >= 0 {
			l.data = l.data[i+1:]
			return trimCR(l.line), cut, nil
		}
		l.data = nil
	}
}

func trimCR(line []byte) []byte {
	return bytes.TrimSuffix(line, []byte{'\r'})
}
