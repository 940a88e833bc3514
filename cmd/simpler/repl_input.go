package main

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/chzyer/readline"
	"golang.org/x/sys/unix"
)

// How the REPL reads lines: readline on a terminal, a plain scanner
// otherwise (piped input replays a session without prompts).
//
// On a terminal, Ctrl-C must not become SIGINT: the terminal would send
// it to the whole foreground process group, which includes the chip and
// SUB processes of process mode, and they would die of it. So the REPL
// turns the terminal's signal keys off for as long as it runs; readline
// sees Ctrl-C as a key at the prompt, and while a statement runs the
// REPL reads the terminal itself (watch) for Ctrl-C, keeping any other
// key typed meanwhile for the next prompt. SIGINT sent to the REPL by
// other means still interrupts the statement.

// lineReader reads one line of input; io.EOF ends the session and
// readline.ErrInterrupt abandons the line (Ctrl-C). watch calls
// interrupt on Ctrl-C until stop is called, while a statement runs.
type lineReader interface {
	readLine(prompt string) (string, error)
	watch(interrupt func()) (stop func())
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
	in := &readlineReader{fd: int(fin.Fd()), stdin: &ttyStdin{f: fin}}
	rl, err := readline.NewEx(&readline.Config{
		Prompt:            ">>> ",
		HistoryLimit:      historyLimit,
		HistorySearchFold: true,
		AutoComplete:      completer{r},
		Stdin:             in.stdin,
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
	in.rl = rl
	var past []string
	in.hist, past = openHistory(historyFile())
	for _, line := range past {
		rl.SaveHistory(line)
	}
	in.quietTerminal()
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
	fd      int
	stdin   *ttyStdin
	saved   *unix.Termios // the terminal's settings before the REPL's, restored by close
	reading atomic.Bool   // a prompt is showing
	hist    *replHistory  // nil: no history file
}

func (l *readlineReader) readLine(prompt string) (string, error) {
	l.rl.SetPrompt(prompt)
	l.reading.Store(true)
	defer l.reading.Store(false)
	line, err := l.rl.Readline()
	if err == nil {
		l.hist.add(line)
	}
	return line, err
}

func (l *readlineReader) close() {
	l.rl.Close()
	l.hist.close()
	if l.saved != nil {
		unix.IoctlSetTermios(l.fd, unix.TCSETS, l.saved)
	}
}

// quietTerminal turns off the terminal's signal keys (Ctrl-C, Ctrl-\,
// Ctrl-Z), its line editing and its echo, for the whole session:
// readline saves and restores these settings around each line it reads,
// and between lines keys wait, unechoed, for watch or the next prompt.
// A terminal that refuses is left as it is.
func (l *readlineReader) quietTerminal() {
	t, err := unix.IoctlGetTermios(l.fd, unix.TCGETS)
	if err != nil {
		return
	}
	saved := *t
	t.Lflag &^= unix.ISIG | unix.ICANON | unix.ECHO | unix.IEXTEN
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if unix.IoctlSetTermios(l.fd, unix.TCSETS, t) == nil {
		l.saved = &saved
	}
}

// watch reads the terminal while a statement runs, which readline does
// not: Ctrl-C calls interrupt (and drops the keys typed before it, as a
// terminal's own Ctrl-C would), other keys are given to readline at the
// next prompt. stop ends the watch and returns once nothing reads the
// terminal any more.
func (l *readlineReader) watch(interrupt func()) (stop func()) {
	var wake [2]int
	if l.saved == nil || unix.Pipe2(wake[:], unix.O_CLOEXEC) != nil {
		return func() {}
	}
	done := make(chan []byte, 1)
	go func() {
		var typed []byte
		defer func() { done <- typed }()
		buf := make([]byte, 256)
		fds := []unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLIN}, {Fd: int32(wake[0]), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err == unix.EINTR {
				continue
			} else if err != nil || fds[1].Revents != 0 {
				return
			}
			if fds[0].Revents&unix.POLLIN == 0 {
				return // hung up
			}
			n, err := unix.Read(l.fd, buf)
			if err == unix.EINTR || err == unix.EAGAIN {
				continue
			} else if n <= 0 || err != nil {
				return
			}
			for _, b := range buf[:n] {
				if b == ctrlC {
					typed = typed[:0]
					interrupt()
				} else {
					typed = append(typed, b)
				}
			}
		}
	}()
	return func() {
		unix.Write(wake[1], []byte{0})
		typed := <-done
		unix.Close(wake[0])
		unix.Close(wake[1])
		l.stdin.unread(typed)
	}
}

// ctrlC is the key Ctrl-C sends.
const ctrlC = 0x03

// ttyStdin is readline's input: the keys watch read come first.
type ttyStdin struct {
	f       *os.File
	mu      sync.Mutex
	pending []byte
}

func (s *ttyStdin) unread(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = append(s.pending, b...)
}

func (s *ttyStdin) Read(p []byte) (int, error) {
	s.mu.Lock()
	if len(s.pending) > 0 {
		n := copy(p, s.pending)
		s.pending = s.pending[n:]
		s.mu.Unlock()
		return n, nil
	}
	s.mu.Unlock()
	return s.f.Read(p)
}

// Close leaves the terminal open: it is the process's stdin.
func (s *ttyStdin) Close() error { return nil }

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

func (l *plainReader) watch(func()) func() { return func() {} }

func (l *plainReader) close() {}
