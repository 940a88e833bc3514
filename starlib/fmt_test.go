package starlib

import (
	"strings"
	"testing"
)

// TestScriptFormatsWithJSONMathAndFmt runs a script that uses the json,
// math and fmt globals and checks what it printed.
func TestScriptFormatsWithJSONMathAndFmt(t *testing.T) {
	out, err := runScript(t, map[string]string{"main.star": `
def main(ctx):
    print(fmt("[%6.2f|%-4d|%04d|%x|%s|%r|%e|%%]", math.pi, 7, 42, 255, "hi", "hi", 12345.678))
    print(fmt("%.3f", 2))
    print(math.sqrt(16.0), math.floor(2.7), math.ceil(2.1))
    d = json.decode('{"a": [1, 2.5, "x"], "b": null}')
    print(d["a"], d["b"])
    print(json.encode({"k": [1, True, None]}))
    print(catch(fmt, "%d", "x"))
    print(catch(fmt, "%d %d", 1))
    print(catch(fmt, "%d", 1, 2))
    print(catch(fmt, "%q", 1))
`})
	if err != nil {
		t.Fatalf("script failed: %v\n%s", err, out)
	}
	want := []string{
		`[  3.14|7   |0042|ff|hi|"hi"|1.234568e+04|%]`,
		`2.000`,
		`4.0 2 3`,
		`[1, 2.5, "x"] None`,
		`{"k":[1,true,null]}`,
		`TypeError: fmt: %d wants an int, got string`,
		`TypeError: fmt: not enough values for "%d %d"`,
		`TypeError: fmt: 2 values for "%d", which uses 1`,
		`ValueError: fmt: unknown verb %q in "%q" (want d, f, e, g, x, X, o, s, r or %)`,
	}
	got := strings.Split(strings.TrimSpace(out), "\n")
	if len(got) != len(want) {
		t.Fatalf("printed %d lines, want %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %q, want %q", i+1, got[i], want[i])
		}
	}
}
