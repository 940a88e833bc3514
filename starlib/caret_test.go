package starlib

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runFileBacktrace runs main.star among files and returns the session's
// backtrace of its error.
func runFileBacktrace(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := NewSession("a2a3sim", []int{0}, "thread", nil, io.Discard, io.Discard)
	err := s.RunFile(filepath.Join(dir, "main.star"))
	if cerr := s.Close(); cerr != nil {
		t.Errorf("session close: %v", cerr)
	}
	if err == nil {
		t.Fatal("the script did not fail")
	}
	return s.Backtrace(err)
}

// TestBacktraceShowsTheLineAndACaret checks the source line and the
// caret's column for a syntax error (in the script and in a module it
// loads), a name the resolver cannot find, and a runtime error's
// innermost frame, and the kind each gets.
func TestBacktraceShowsTheLineAndACaret(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  string // the last lines of the backtrace
	}{
		{"syntax", map[string]string{"main.star": "def main(ctx):\n    x = [1, 2 yy]\n"},
			"        x = [1, 2 yy]\n" +
				"                  ^\n" +
				"SyntaxError: "},
		{"syntax at a tab", map[string]string{"main.star": "def main(ctx):\n\tx = (1 2)\n"},
			"    \tx = (1 2)\n" +
				"    \t       ^\n" +
				"SyntaxError: "},
		{"keyword", map[string]string{"main.star": "x = 1 def\n"},
			"    x = 1 def\n" +
				"          ^\n" +
				"SyntaxError: "},
		{"name", map[string]string{"main.star": "def main(ctx):\n    return nope + 1\n"},
			"        return nope + 1\n" +
				"               ^\n" +
				"NameError: "},
		{"loaded module", map[string]string{"main.star": "load(\"lib.star\", \"f\")\n", "lib.star": "def f(:\n    pass\n"},
			"    def f(:\n" +
				"          ^\n" +
				"SyntaxError: cannot load "},
		{"runtime", map[string]string{"main.star": "def f(d):\n    return d[\"k\"]\n\ndef main(ctx):\n    f({})\n"},
			"        return d[\"k\"]\n" +
				"                ^\n" +
				"KeyError: "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := runFileBacktrace(t, c.files)
			lines := strings.Split(got, "\n")
			want := strings.Split(c.want, "\n")
			if len(lines) < len(want) {
				t.Fatalf("backtrace too short:\n%s", got)
			}
			tail := lines[len(lines)-len(want):]
			for i := range want {
				if i == len(want)-1 {
					if !strings.HasPrefix(tail[i], want[i]) {
						t.Errorf("message line %q, want it to start with %q\n%s", tail[i], want[i], got)
					}
				} else if tail[i] != want[i] {
					t.Errorf("line %d: %q, want %q\n%s", i, tail[i], want[i], got)
				}
			}
		})
	}
}
