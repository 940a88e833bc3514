package main

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/chzyer/readline"
)

// How the REPL reads lines: readline on a terminal, a plain scanner
// otherwise (piped input replays a session without prompts).

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
