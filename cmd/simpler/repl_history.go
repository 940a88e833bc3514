package main

import (
	"bufio"
	"os"
	"strings"
)

// historyLimit is how many lines of the history file a session loads.
const historyLimit = 500

// replHistory is the REPL's history file, kept by the REPL rather than
// by readline, so that it is always mode 0600: a token typed at the
// prompt must not become readable by other users (readline would create
// the file, and rewrite it when it grows, with mode 0666 less the umask).
type replHistory struct {
	f *os.File
}

// openHistory opens (or creates) the history file at path with mode
// 0600, tightening a file an older simpler left wider, and returns its
// last historyLimit lines, oldest first. A file that cannot be opened
// gives a session without history, not an error.
func openHistory(path string) (*replHistory, []string) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, nil
	}
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := sc.Text(); strings.TrimSpace(line) != "" {
			lines = append(lines, line)
		}
	}
	if len(lines) > historyLimit {
		lines = lines[len(lines)-historyLimit:]
	}
	return &replHistory{f: f}, lines
}

// add appends one line typed at the prompt.
func (h *replHistory) add(line string) {
	if h == nil || strings.TrimSpace(line) == "" {
		return
	}
	h.f.WriteString(line + "\n")
}

func (h *replHistory) close() {
	if h != nil {
		h.f.Close()
	}
}
