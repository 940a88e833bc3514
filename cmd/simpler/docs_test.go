package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"simpler/golden"
)

// The user docs are checked by running them. docs/repl.md and
// docs/testing.md run in a scratch directory each (TestDocsRun);
// README.md and docs/guide.md run in order in one fresh copy of the
// repository, as a newcomer pastes them (TestDocsFreshClone, below). In
// all of them:
//
//   - a fenced block right after <!-- file: PATH --> is written to PATH
//     (in the fresh copy: compared with PATH when the repository ships
//     it, written when it is a file the reader is asked to save);
//   - each "$ simpler ..." line of a ```console block runs this binary as
//     simpler in that directory ("< FILE" feeds it input); the lines up to
//     the next "$" are its expected output, stdout and stderr together;
//   - a block right after <!-- repl: FLAGS --> is a REPL transcript: its
//     ">>> " and "... " lines are fed to `simpler repl FLAGS`, the other
//     lines are the expected output;
//   - a console block right after <!-- no-check ... --> is not compared:
//     TestDocsRun does not run it, TestDocsFreshClone runs each of its
//     lines through sh and wants it to succeed (it builds the binary, or
//     tours commands whose output is long);
//   - a console block right after <!-- by-hand ... --> is never run (it
//     waits for input, runs for minutes or needs another host).
//
// In expected output a line "[...]" matches any number of lines; addresses
// (0xADDR) and durations such as "(0.01s)" may differ.
var checkedDocs = []string{"docs/repl.md", "docs/testing.md"}

type docBlock struct {
	marker string // the HTML comment right before the fence, if any
	info   string // the fence's info string
	body   []string
	line   int
}

var markerRE = regexp.MustCompile(`^<!--\s*([a-z-]+):?\s*(.*?)\s*-->$`)

func parseDoc(src string) []docBlock {
	var blocks []docBlock
	lines := strings.Split(src, "\n")
	prev := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "```") {
			b := docBlock{info: strings.TrimSpace(strings.TrimPrefix(l, "```")), line: i + 1}
			if markerRE.MatchString(prev) {
				b.marker = prev
			}
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
				b.body = append(b.body, lines[i])
			}
			blocks = append(blocks, b)
			prev = ""
			continue
		}
		if strings.TrimSpace(l) != "" {
			prev = strings.TrimSpace(l)
		}
	}
	return blocks
}

// marker returns the kind and argument of a block's marker comment.
func (b docBlock) kind() (string, string) {
	m := markerRE.FindStringSubmatch(b.marker)
	if m == nil {
		return "", ""
	}
	return m[1], m[2]
}

var durationRE = regexp.MustCompile(`\(\d+\.\d+s\)`)

func normalizeDoc(s string) string {
	return durationRE.ReplaceAllString(golden.Normalize(s), "(T)")
}

// matchLines reports whether got matches want, where a want line "[...]"
// matches any number of got lines.
func matchLines(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if want[0] == "[...]" {
		for k := 0; k <= len(got); k++ {
			if matchLines(want[1:], got[k:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && want[0] == got[0] && matchLines(want[1:], got[1:])
}

func splitOutput(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// runDocCommand runs `simpler args...` in dir with stdin, returning
// stdout and stderr interleaved as a terminal would show them.
func runDocCommand(t *testing.T, dir string, args []string, stdin string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = cliEnv("NO_COLOR=1", "XDG_STATE_HOME="+t.TempDir())
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("running simpler %v: %v", args, err)
		}
	}
	checkNoShm(t, cmd.Env)
	return out.String()
}

func TestDocsRun(t *testing.T) {
	for _, name := range checkedDocs {
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("..", "..", name))
			if err != nil {
				t.Fatal(err)
			}
			blocks := parseDoc(string(src))
			dir := t.TempDir()
			for _, b := range blocks {
				if k, path := b.kind(); k == "file" {
					writeFiles(t, dir, map[string]string{path: strings.Join(b.body, "\n") + "\n"})
				}
			}
			checked := 0
			for _, b := range blocks {
				k, arg := b.kind()
				switch {
				case k == "repl":
					checked++
					checkREPLBlock(t, name, dir, b, strings.Fields(arg))
				case b.info == "console" && k != "no-check" && k != "by-hand":
					checked += checkConsoleBlock(t, name, dir, b)
				}
			}
			if checked == 0 {
				t.Errorf("%s: no checked commands", name)
			}
			t.Logf("%s: %d commands and sessions checked", name, checked)
		})
	}
}

func checkConsoleBlock(t *testing.T, doc, dir string, b docBlock) int {
	t.Helper()
	n := 0
	for i := 0; i < len(b.body); {
		line := b.body[i]
		if !strings.HasPrefix(line, "$ ") {
			t.Errorf("%s:%d: console block line %q is not a command", doc, b.line+1+i, line)
			i++
			continue
		}
		fields := strings.Fields(strings.TrimPrefix(line, "$ "))
		var want []string
		j := i + 1
		for ; j < len(b.body) && !strings.HasPrefix(b.body[j], "$ "); j++ {
			want = append(want, b.body[j])
		}
		if len(fields) == 0 || fields[0] != "simpler" {
			t.Errorf("%s:%d: %q: only simpler commands can be checked (mark the block no-check)", doc, b.line+1+i, line)
			i = j
			continue
		}
		args, stdin := fields[1:], ""
		if k := len(args); k >= 2 && args[k-2] == "<" {
			in, err := os.ReadFile(filepath.Join(dir, args[k-1]))
			if err != nil {
				t.Fatalf("%s:%d: %v", doc, b.line+1+i, err)
			}
			args, stdin = args[:k-2], string(in)
		}
		got := normalizeDoc(runDocCommand(t, dir, args, stdin))
		if !matchLines(splitOutput(normalizeDoc(strings.Join(want, "\n"))), splitOutput(got)) {
			t.Errorf("%s:%d: %s\nwant:\n%s\ngot:\n%s", doc, b.line+1+i, line, strings.Join(want, "\n"), got)
		}
		n++
		i = j
	}
	return n
}

// replTranscript splits a REPL block into the lines typed at its ">>> "
// and "... " prompts and the expected output.
func replTranscript(b docBlock) (input, want []string) {
	for _, l := range b.body {
		switch {
		case strings.HasPrefix(l, ">>> "):
			input = append(input, strings.TrimPrefix(l, ">>> "))
		case l == "..." || l == "... ":
			input = append(input, "")
		case strings.HasPrefix(l, "... "):
			input = append(input, strings.TrimPrefix(l, "... "))
		default:
			want = append(want, l)
		}
	}
	return input, want
}

func checkREPLBlock(t *testing.T, doc, dir string, b docBlock, flags []string) {
	t.Helper()
	input, want := replTranscript(b)
	got := normalizeDoc(runDocCommand(t, dir, append([]string{"repl"}, flags...), strings.Join(input, "\n")+"\n"))
	if !matchLines(splitOutput(normalizeDoc(strings.Join(want, "\n"))), splitOutput(got)) {
		t.Errorf("%s:%d: REPL session\nwant:\n%s\ngot:\n%s", doc, b.line, strings.Join(want, "\n"), got)
	}
}

func TestDocCheckerMatches(t *testing.T) {
	cases := []struct {
		want, got string
		ok        bool
	}{
		{"a\n[...]\nd", "a\nb\nc\nd", true},
		{"a\n[...]\nd", "a\nd", true},
		{"a\n[...]", "a", true},
		{"a\nb", "a\nc", false},
		{"a\n[...]\nd", "a\nb\nc", false},
		{"x (0.01s) 0x7fab12cd00", "x (1.23s) 0xADDR", true},
	}
	for _, c := range cases {
		got := matchLines(splitOutput(normalizeDoc(c.want)), splitOutput(normalizeDoc(c.got)))
		if got != c.ok {
			t.Errorf("matchLines(%q, %q) = %v", c.want, c.got, got)
		}
	}
	blocks := parseDoc("text\n<!-- file: a/b.star -->\n```python\nx = 1\n```\n\n<!-- repl: --devices 0 -->\n\n```\n>>> 1\n1\n```\n")
	if len(blocks) != 2 {
		t.Fatalf("parsed %d blocks", len(blocks))
	}
	if k, a := blocks[0].kind(); k != "file" || a != "a/b.star" || fmt.Sprint(blocks[0].body) != "[x = 1]" {
		t.Errorf("file block: %q %q %q", k, a, blocks[0].body)
	}
	if k, a := blocks[1].kind(); k != "repl" || a != "--devices 0" {
		t.Errorf("repl block: %q %q", k, a)
	}
}
