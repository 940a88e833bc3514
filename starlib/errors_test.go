package starlib

import (
	"errors"
	"strings"
	"testing"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"simpler/engine"
)

// starlarkError runs src (a module whose top level fails) with the
// universe only and returns its error.
func starlarkError(t *testing.T, src string) error {
	t.Helper()
	opts := &syntax.FileOptions{Recursion: true, While: true, TopLevelControl: true}
	_, err := starlark.ExecFileOptions(opts, &starlark.Thread{}, "x.star", src, nil)
	if err == nil {
		t.Fatalf("%q did not fail", src)
	}
	return err
}

// Starlark's own errors, as go.starlark.net words them, get the kind
// upstream's Python would raise.
func TestStarlarkRuntimeErrorsGetKinds(t *testing.T) {
	cases := []struct{ src, want string }{
		{`[1][3]`, "IndexError: list index 3 out of range [-1:0]"},
		{`[].pop()`, "IndexError: pop: index -1 out of range: empty list"},
		{`"ab"[5]`, "IndexError: string index 5 out of range [-2:1]"},
		{`{}["a"]`, `KeyError: key "a" not in dict`},
		{`{}.pop("a")`, "KeyError: pop: missing key"},
		{`1 // 0`, "ValueError: floored division by zero"},
		{`1 / 0`, "ValueError: floating-point division by zero"},
		{`1 % 0`, "ValueError: integer modulo by zero"},
		{`int("z")`, "ValueError: int: invalid literal with base 10: z"},
		{`"abc".index("z")`, "ValueError: index: substring not found"},
		{`range(3, 1, 0)`, "ValueError: range: step argument must not be zero"},
		{`a, b = [1]`, "ValueError: too few values to unpack (got 1, want 2)"},
		{`1 << -1`, "ValueError: negative shift count: -1"},
		{`1 + "a"`, "TypeError: unknown binary op: int + string"},
		{`-"a"`, "TypeError: unknown unary op: - string"},
		{`1 < "a"`, "TypeError: int < string not implemented"},
		{`len(1)`, "TypeError: len: value of type int has no len"},
		{`"a".nope`, "TypeError: string has no .nope field or method"},
		{`{[]: 1}`, "TypeError: unhashable type: list"},
		{`1()`, "TypeError: invalid call of non-function (int)"},
		{`[x for x in 1]`, "TypeError: int value is not iterable"},
		{`(lambda x: x)()`, "TypeError: function lambda missing 1 argument (x)"},
		{`(lambda: 1)(2)`, "TypeError: function lambda accepts no arguments (1 given)"},
		{`(lambda x: x)(1, y = 2)`, `TypeError: function lambda got an unexpected keyword argument "y"`},
		{`dict(1, 2)`, "TypeError: dict: got 2 arguments, want at most 1"},
		{`"a".split(1)`, "TypeError: split: got int for separator, want string"},
		{`"a".startswith(1)`, "TypeError: startswith: got int, want string or tuple of string"},
		{`fail("boom")`, "RuntimeError: boom"},
		{`fail("KeyError: k")`, "KeyError: k"},
		{"def f(n):\n    return f(n + 1)\nf(0)", "RuntimeError: Starlark stack overflow"},
	}
	for _, c := range cases {
		err := starlarkError(t, c.src)
		if got := Message(err); got != c.want {
			t.Errorf("%s: Message %q, want %q", c.src, got, c.want)
		}
		if got := labelled(err); got.Error() != c.want || engine.KindOf(got) != engine.Kind(c.want[:strings.Index(c.want, ":")]) {
			t.Errorf("%s: labelled %q (kind %s), want %q", c.src, got, engine.KindOf(got), c.want)
		}
	}
}

// classify on texts that are not Starlark runtime errors: kinded ones,
// the assert module's, load chains, cancellation, syntax errors, and
// anything else.
func TestClassifyMessages(t *testing.T) {
	cases := []struct{ msg, want string }{
		{"ValueError: bad", "ValueError: bad"},
		{"AssertionError: 1 != 2", "AssertionError: 1 != 2"},
		{"something new", "RuntimeError: something new"},
		{"Starlark computation cancelled: RuntimeError: too many steps", "RuntimeError: too many steps"},
		{"Starlark computation cancelled: stop", "RuntimeError: Starlark computation cancelled: stop"},
		{"x.star:3:7: got newline, want ')'", "SyntaxError: x.star:3:7: got newline, want ')'"},
		{"x.star:3:7: undefined: np", "NameError: x.star:3:7: undefined: np"},
		{"<repl 4>:1:1: undefined: y", "NameError: <repl 4>:1:1: undefined: y"},
		{"<repl 4>:1:5: got int literal, want ']'", "SyntaxError: <repl 4>:1:5: got int literal, want ']'"},
		{"local variable x referenced before assignment", "NameError: local variable x referenced before assignment"},
		{`cannot load lib/a.star: ValueError: cannot load "lib/a.star": no such file or directory`,
			`ValueError: cannot load "lib/a.star": no such file or directory`},
		{`cannot load a.star: ValueError: cannot load "b.star": outside the load roots`,
			`ValueError: cannot load a.star: cannot load "b.star": outside the load roots`},
		{"cannot load a.star: cannot load b.star: ValueError: load cycle: a.star -> b.star -> a.star",
			"ValueError: cannot load a.star: cannot load b.star: load cycle: a.star -> b.star -> a.star"},
		{"cannot load a.star: lib/a.star:1:3: got newline, want ')'", "SyntaxError: cannot load a.star: lib/a.star:1:3: got newline, want ')'"},
		{"cannot load a.star: list index 3 out of range [-1:0]", "IndexError: cannot load a.star: list index 3 out of range [-1:0]"},
		{"cannot load a.star: RuntimeError: too many steps", "RuntimeError: cannot load a.star: too many steps"},
		{"cannot load a.star: odd", "ValueError: cannot load a.star: odd"},
		{"load: name f not found in module lib/x.star", "ValueError: load: name f not found in module lib/x.star"},
	}
	for _, c := range cases {
		if got := kinded(c.msg); got != c.want {
			t.Errorf("%q: got %q, want %q", c.msg, got, c.want)
		}
	}
}

// The builtin wrapper gives an argument error its kind where it is made,
// so the engine sees it too; an EvalError from nested Starlark passes
// through unchanged, keeping its frames.
func TestBuiltinArgumentErrorsAreTypeErrors(t *testing.T) {
	th := &starlark.Thread{}
	spec := builtin("CommBufferSpec", newBufferSpec)
	_, err := starlark.Call(th, spec, nil, []starlark.Tuple{{starlark.String("nmae"), starlark.String("x")}})
	var e *engine.Error
	if !errors.As(err, &e) || e.Kind != engine.TypeError || !strings.HasPrefix(Message(err), "TypeError: CommBufferSpec: unexpected keyword argument \"nmae\"") {
		t.Fatalf("unknown keyword: %v (%T)", err, errors.Unwrap(err))
	}
	_, err = starlark.Call(th, spec, starlark.Tuple{starlark.String("x"), starlark.None, starlark.MakeInt(1), starlark.MakeInt(4), starlark.MakeInt(5)}, nil)
	if got := Message(err); got != "TypeError: CommBufferSpec: got 5 arguments, want at most 4" {
		t.Errorf("too many arguments: %q", got)
	}
	_, err = starlark.Call(th, spec, nil, nil)
	if got := Message(err); got != "TypeError: CommBufferSpec: missing argument for name" {
		t.Errorf("missing argument: %q", got)
	}
	_, err = starlark.Call(th, spec, starlark.Tuple{starlark.MakeInt(3)}, nil)
	if got := Message(err); got != "TypeError: CommBufferSpec: for parameter name: got int, want string" {
		t.Errorf("wrong type: %q", got)
	}

	inner := starlarkError(t, "def f():\n    [][1]\nf()\n")
	pass := builtin("pass", func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
		return nil, inner
	})
	if _, err := starlark.Call(th, pass, nil, nil); err != inner {
		t.Errorf("an EvalError from nested Starlark was replaced: %v", err)
	}
}

// The argument errors of the script surface, seen by a script.
func TestScriptSeesTypeErrorsForArguments(t *testing.T) {
	out, err := runScript(t, map[string]string{"main.star": `
def main(ctx):
    w = Worker(level = 3, device_ids = [0])
    print(catch(Worker, levle = 3))
    print(catch(host_tensor, [1], FLOAT32, None, 4))
    print(catch(TaskArgs().add_tensor))
    print(catch(w.malloc, "8"))
    print(catch(w.register))
    print(catch(struct, 1))
    print(catch(array.zeros))
    w.close()
`})
	if err != nil {
		t.Fatal(Backtrace(err))
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 7 {
		t.Fatalf("got %q", out)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "TypeError: ") {
			t.Errorf("not a TypeError: %q", l)
		}
	}
}

// An error raised inside an orchestration function reaches the caller of
// run and submit with its kind and with the orchestration's frames.
func TestOrchestrationErrorsHaveKinds(t *testing.T) {
	_, err := runScript(t, map[string]string{"main.star": `
def helper(xs):
    return xs[3]

def orch(o, args, cfg):
    helper([1])

def main(ctx):
    w = Worker(level = 3, device_ids = [0])
    w.init()
    w.run(orch)
`})
	if err == nil {
		t.Fatal("want the orchestration's error")
	}
	if k := engine.KindOf(err); k != engine.IndexError {
		t.Errorf("kind %s of %v, want IndexError", k, err)
	}
	bt := Backtrace(err)
	for _, want := range []string{"in main", "main.star:6:11: in orch", "main.star:3:14: in helper", "IndexError: list index 3 out of range [-1:0]"} {
		if !strings.Contains(bt, want) {
			t.Errorf("backtrace lacks %q:\n%s", want, bt)
		}
	}
	out, _ := runScript(t, map[string]string{"main.star": `
def fails(o, args, cfg):
    fail("no good")

def divides(o, args, cfg):
    return 1 // 0

def main(ctx):
    w = Worker(level = 3, device_ids = [0])
    w.init()
    print(catch(w.submit, fails))
    print(catch(w.run, divides))
    w.close()
`})
	if want := "RuntimeError: no good\nValueError: floored division by zero\n"; out != want {
		t.Errorf("caught: %q, want %q", out, want)
	}
}
