package starlib

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"go.starlark.net/starlark"

	"simpler/kind"
)

// Backtrace formats err as the package's Backtrace does, and shows the
// source line of where it happened with a caret under its column, as
// Python does: for a syntax error (in the script, a module it loads or a
// chunk typed at the REPL) the line the parser or resolver stopped at,
// before the message; for a runtime error the line of the innermost
// Starlark frame, after that frame. A line whose source this session
// does not hold is left out.
func (s *Session) Backtrace(err error) string {
	var b strings.Builder
	var ee *starlark.EvalError
	msg := ""
	if errors.As(err, &ee) {
		msg = kinded(ee.Msg)
	} else {
		msg = kindedError(err).Error()
	}
	file, line, col, isSyntax := syntaxPosition(msg)
	if ee != nil {
		frames := starlarkFrames(ee)
		if len(frames) > 0 {
			b.WriteString("Traceback (most recent call last):\n")
			for i, f := range frames {
				fmt.Fprintf(&b, "  %s: in %s\n", f.Pos, f.Name)
				if i == len(frames)-1 && !isSyntax {
					b.WriteString(s.caretLines(f.Pos.Filename(), int(f.Pos.Line), int(f.Pos.Col), ""))
				}
			}
		}
	}
	if isSyntax {
		b.WriteString(s.caretLines(file, line, col, msg))
	}
	b.WriteString(msg)
	return b.String()
}

// starlarkFrames are the frames of ee that are Starlark code, outermost
// first: a builtin's frame is left out (the message names the builtin).
func starlarkFrames(ee *starlark.EvalError) []starlark.CallFrame {
	var frames []starlark.CallFrame
	for _, f := range ee.CallStack {
		if f.Pos.Filename() != "<builtin>" {
			frames = append(frames, f)
		}
	}
	return frames
}

// syntaxPosition finds the position a scanner, parser or resolver error
// names ("SyntaxError: [cannot load a.star: ]a.star:3:7: got ..."): the
// innermost module's, after the chain of loads that led to it.
func syntaxPosition(msg string) (file string, line, col int, ok bool) {
	rest, ok := strings.CutPrefix(msg, string(kind.SyntaxError)+": ")
	if !ok {
		rest, ok = strings.CutPrefix(msg, string(kind.NameError)+": ")
	}
	if !ok {
		return "", 0, 0, false
	}
	msg = rest
	for strings.HasPrefix(msg, loadPrefix) {
		i := strings.Index(msg, ": ")
		if i < 0 {
			return "", 0, 0, false
		}
		msg = msg[i+2:]
	}
	m := positionPrefix.FindStringSubmatch(msg)
	if m == nil {
		return "", 0, 0, false
	}
	line, _ = strconv.Atoi(m[2])
	col, _ = strconv.Atoi(m[3])
	return m[1], line, col, true
}

// positionPrefix is the "file:line:col: " a syntax error starts with.
var positionPrefix = regexp.MustCompile(`^(<repl \d+>|[^\s:]+):(\d+):(\d+): `)

// caretLines is line `line` of module file, indented by four spaces,
// and a caret under column col (1-based, in runes), moved to the start
// of the token a syntax error's message (msg) names; "" when the session
// has no such source line.
func (s *Session) caretLines(file string, line, col int, msg string) string {
	src := s.loader.sourceOf(file)
	if src == nil || line < 1 {
		return ""
	}
	lines := bytes.Split(src, []byte("\n"))
	if line > len(lines) {
		return ""
	}
	text := strings.TrimRight(string(lines[line-1]), "\r")
	if strings.TrimSpace(text) == "" {
		return ""
	}
	if msg != "" {
		col = tokenStart(text, col, msg)
	}
	return "    " + text + "\n    " + caretUnder(text, col) + "\n"
}

// gotToken finds the token a parser error names: "got identifier, want
// ']'", "got ':', want ')'".
var gotToken = regexp.MustCompile(`: got ('[^']+'|identifier|int literal|float literal|string literal|bytes literal|and|break|continue|def|elif|else|for|if|in|lambda|load|not|or|pass|return|while)(,| after)`)

// tokenStart moves col to the start of the token the parser error msg
// names. go.starlark.net reports "got X, want Y" at the scanner's
// position, which is just past the token X; Python's caret is under its
// first character. A message of another form keeps col: the parser
// reports it at the token's start already ("want primary expression"),
// or the token is a newline, an indent or the end of the file.
func tokenStart(text string, col int, msg string) int {
	m := gotToken.FindStringSubmatch(msg)
	if m == nil || strings.Contains(msg, "want primary expression") {
		return col
	}
	runes := []rune(text)
	end := col - 1 // runes[:end] ends with the token
	if end < 1 || end > len(runes) {
		return col
	}
	start := end
	switch tok := m[1]; {
	case strings.HasPrefix(tok, "'"):
		start = end - (len([]rune(tok)) - 2)
	case tok == "string literal" || tok == "bytes literal":
		quote := runes[end-1]
		start = end - 1
		for start > 0 && runes[start-1] != quote {
			start--
		}
		start-- // the opening quote
		for start > 0 && unicode.IsLetter(runes[start-1]) {
			start-- // a prefix such as b or r
		}
	default: // an identifier, a keyword or a number
		for start > 0 && (unicode.IsLetter(runes[start-1]) || unicode.IsDigit(runes[start-1]) || runes[start-1] == '_' || runes[start-1] == '.') {
			start--
		}
	}
	if start < 0 || start >= end {
		return col
	}
	return start + 1
}

// caretUnder is the padding that puts a caret under rune column col of
// text: a tab stays a tab, so the caret lines up however tabs are shown.
func caretUnder(text string, col int) string {
	var pad strings.Builder
	n := 1
	for _, r := range text {
		if n >= col {
			break
		}
		if r == '\t' {
			pad.WriteByte('\t')
		} else {
			pad.WriteByte(' ')
		}
		n++
	}
	// A column past the end of the line (an unexpected newline) puts
	// the caret just after its last character.
	return pad.String() + "^"
}

// sourceOf is the text of module name as it was loaded or typed, or nil.
func (l *loader) sourceOf(name string) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if m, ok := l.modules[name]; ok && m.src != nil {
		return m.src
	}
	return l.unparsed[name]
}

// keepUnparsed records the text of a REPL chunk that did not parse: it
// is no module, but its error shows its line.
func (l *loader) keepUnparsed(name string, src []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unparsed == nil {
		l.unparsed = map[string][]byte{}
	}
	l.unparsed[name] = src
}
