package starlib

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.starlark.net/starlark"

	"simpler/kind"
)

// Every error a script sees starts with its kind ("ValueError: ...").
// Engine and binding errors are kind.Errors: their kind is a value, read
// with kind.Of, never from their text. Starlark's own errors are text:
// the errors go.starlark.net makes (argument unpacking, operators,
// indexing, fail, load) have no kind, a fail("ValueError: ...") or an
// EvalError carries its kind in its message, and some of starlib's own
// Go errors are still made as text ("TypeError: ..." from fmt.Errorf).
// Those are classified here, in one place, by their text: the builtin
// wrapper gives an error from a builtin's own code its kind where it is
// made, labelled gives a Starlark error its kind where it leaves a call
// (a run's orchestration function, main), and Message and Backtrace, the
// texts a script and the CLI show, classify whatever still has none.

// errorf returns an error whose message starts with its kind, as every
// engine error seen by scripts does.
func errorf(k kind.Kind, format string, args ...any) error {
	return kind.Errorf(k, format, args...)
}

// assertionKind is the assert module's kind (Python's AssertionError): not
// an engine kind, but a kind all the same, kept as it is.
const assertionKind = "AssertionError: "

// kindRule gives the kind of the Starlark messages a pattern matches.
type kindRule struct {
	re *regexp.Regexp
	k  kind.Kind
}

// kindRules classify go.starlark.net's own messages, first match first,
// the way upstream's Python would raise them. Division by zero
// (ZeroDivisionError) and overflow are ValueErrors here; attribute errors
// are TypeErrors. A message no rule matches is a RuntimeError, as is
// fail(), stack overflow and recursion.
var kindRules = []kindRule{
	// Indexing: "list index 3 out of range [-1:0]", "index 0 out of
	// range: empty list", "pop: index 5 out of range".
	{regexp.MustCompile(`\bindex -?\d+ out of range|tuple index out of range`), kind.IndexError},
	// Dict and set lookups, %-format and str.format keys.
	{regexp.MustCompile(`^key .+ not in \w+$|: missing key$|: empty (dict|set)$|^key not found: |: keyword .+ not found$`), kind.KeyError},
	// Values of the right type but wrong: arithmetic, conversions, ranges.
	{regexp.MustCompile(`by zero$|shift count|repeat count .* too large|excessive repeat|not a valid slice step|step argument must not be zero`), kind.ValueError},
	{regexp.MustCompile(`invalid literal|invalid float literal|: empty string$|base must be an integer|too large to convert|number too large|cannot convert float (infinity|NaN)`), kind.ValueError},
	{regexp.MustCompile(`out of range|too (many|few) values to unpack|value not in list|element not found|substring not found|empty separator|duplicate key|has length \d+, want 2`), kind.ValueError},
	{regexp.MustCompile(`^load: name .+ not found in module `), kind.ValueError},
	// A name bound later than it is read: Python's UnboundLocalError, a
	// NameError.
	{regexp.MustCompile(`^(local|global|free) variable \w+ referenced before assignment$`), kind.NameError},
	// Arguments: what starlark.UnpackArgs and a Starlark function's
	// parameter binding say.
	{regexp.MustCompile(`got \d+ arguments?, wants? |: for parameter |got multiple values for|unexpected keyword arguments?|unexpected positional arguments?|missing argument for |missing \d+ arguments? |accepts no arguments|accepts (at most |at least |exactly )?\d+ positional arguments?|does not accept keyword arguments|duplicate keyword arg`), kind.TypeError},
	// Operands and values of the wrong type.
	{regexp.MustCompile(`unknown (binary|unary) op|not implemented$|unhashable|invalid call of non-function|is not iterable|must be a mapping|must be iterable|must be strings|does not support item assignment|unhandled index operation|invalid slice operand|has no \.\w+ field or method|can't assign to \.|has no len|got \w+, want |format requires|arguments for format string|as left operand|cannot convert \w+ to int|in sequence assignment|want string, got|, want string`), kind.TypeError},
}

// syntaxError matches a scanner, parser or resolver error
// ("lib/x.star:3:7: got newline, want ')'", "<repl 2>:1:1: undefined:
// x"): a SyntaxError, or a NameError when the resolver found a name
// that is defined nowhere (undefinedName).
var syntaxError = regexp.MustCompile(`^(<repl \d+>|[^\s:]+):\d+:\d+: `)

// undefinedName matches the resolver's error for an unknown name.
var undefinedName = regexp.MustCompile(`^(<repl \d+>|[^\s:]+):\d+:\d+: undefined: `)

// How go.starlark.net starts the error of fail(msg), of a cancelled thread
// (ahead of the reason) and of a failed load() (ahead of the module).
const (
	failPrefix     = "fail: "
	canceledPrefix = "Starlark computation cancelled: "
	loadPrefix     = "cannot load "
)

// classify returns the kind of msg and msg without it. A message that
// already starts with a kind keeps it. fail("x") is a RuntimeError "x",
// fail("ValueError: x") a ValueError "x", and a cancelled thread has its
// reason's kind.
func classify(msg string) (kind.Kind, string) {
	if k, rest, ok := kind.Split(msg); ok {
		return k, rest
	}
	if rest, ok := strings.CutPrefix(msg, failPrefix); ok {
		if k, r, ok := kind.Split(rest); ok {
			return k, r
		}
		return kind.RuntimeError, rest
	}
	if rest, ok := strings.CutPrefix(msg, canceledPrefix); ok {
		if k, r, ok := kind.Split(rest); ok {
			return k, r
		}
		return kind.RuntimeError, msg
	}
	if strings.HasPrefix(msg, loadPrefix) {
		return classifyLoad(msg)
	}
	if undefinedName.MatchString(msg) {
		return kind.NameError, msg
	}
	if syntaxError.MatchString(msg) {
		return kind.SyntaxError, msg
	}
	for _, r := range kindRules {
		if r.re.MatchString(msg) {
			return r.k, msg
		}
	}
	return kind.RuntimeError, msg
}

// classifyLoad classifies a load() failure, which go.starlark.net words as
// "cannot load A: cannot load B: <error>", one prefix per module on the
// way. The innermost error's kind moves to the front and the chain of
// modules stays, except that when the innermost error is the loader's own
// `cannot load "B" ...` the prefix naming B is not said twice.
func classifyLoad(msg string) (kind.Kind, string) {
	var chain, modules []string
	rest := msg
	for strings.HasPrefix(rest, loadPrefix) {
		i := strings.Index(rest, ": ")
		if i < 0 {
			break
		}
		chain = append(chain, rest[:i+2])
		modules = append(modules, rest[len(loadPrefix):i])
		rest = rest[i+2:]
	}
	if len(chain) == 0 {
		return kind.RuntimeError, msg
	}
	_, _, kinded := kind.Split(rest)
	k, inner := classify(rest)
	if last := len(chain) - 1; strings.HasPrefix(inner, loadPrefix+strconv.Quote(modules[last])) {
		chain = chain[:last]
	}
	if !kinded && k == kind.RuntimeError {
		k = kind.ValueError // a module that cannot be loaded, for no better-known reason
	}
	return k, strings.Join(chain, "") + inner
}

// kinded is msg starting with its kind.
func kinded(msg string) string {
	if strings.HasPrefix(msg, assertionKind) {
		return msg
	}
	k, rest := classify(msg)
	return string(k) + ": " + rest
}

// kindedError returns err as a kind.Error whose text starts with its
// kind. A Starlark EvalError passes unchanged: it carries the call stack
// of where it happened, and go.starlark.net passes only that exact type
// through the calls above it (labelled gives it its kind where it
// leaves). An error that carries a kind.Error has that kind; one that
// carries none is text, classified by it (an AssertionError, a kind of
// its own, passes unchanged).
func kindedError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*starlark.EvalError); ok {
		return err
	}
	msg := err.Error()
	var e *kind.Error
	if errors.As(err, &e) {
		// A wrapper of a kind.Error (fmt.Errorf("...: %w")) says its
		// own text; the script sees its kind in front of it.
		k := kind.Of(err)
		if strings.HasPrefix(msg, string(k)+": ") {
			return err
		}
		return &kind.Error{Kind: k, Msg: msg, Cause: err}
	}
	if strings.HasPrefix(msg, assertionKind) {
		return err
	}
	k, rest := classify(msg)
	return &kind.Error{Kind: k, Msg: rest, Cause: err}
}

// labelled returns err with a message that starts with its kind. An
// EvalError is copied with the kinded message, keeping its call stack
// and cause, so that it still prints its backtrace and go.starlark.net
// still passes it through the calls above unchanged.
func labelled(err error) error {
	ee, ok := err.(*starlark.EvalError)
	if !ok {
		return kindedError(err)
	}
	msg := kinded(ee.Msg)
	if msg == ee.Msg {
		return err
	}
	cp := *ee
	cp.Msg = msg
	return &cp
}

// kindCanceled gives a Starlark error its kind; the loader calls it on
// every module's error, which go.starlark.net then words as a load()
// failure.
func kindCanceled(err error) error {
	if err == nil {
		return nil
	}
	return labelled(err)
}

// builtinFunc is the Go side of a builtin.
type builtinFunc func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error)

// builtin is starlark.NewBuiltin whose errors all have a kind. The
// errors of go.starlark.net's argument helpers (UnpackArgs,
// UnpackPositionalArgs, AsInt32, ...) have none; upstream's Python
// raises TypeError for a wrong type, an unknown keyword, a wrong number
// of arguments or a missing one, and ValueError for an int out of range.
func builtin(name string, fn builtinFunc) *starlark.Builtin {
	return starlark.NewBuiltin(name, func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
		v, err := fn(th, b, args, kw)
		if err != nil {
			return nil, kindedError(err)
		}
		return v, nil
	})
}

// Message is the text a script sees for err: for a Starlark evaluation
// error its message without the backtrace, starting with its kind.
// fail("ValueError: ...") reads as "ValueError: ...": a library written
// in Starlark raises kinded errors the way the engine does.
func Message(err error) string {
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		return kinded(ee.Msg)
	}
	return kindedError(err).Error()
}

// Backtrace formats err as simpler prints it: every Starlark frame as
// file:line:col with its function, innermost last, then the message.
// Frames of built-in functions are left out: the message names the
// builtin.
func Backtrace(err error) string {
	var b strings.Builder
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		var frames []starlark.CallFrame
		for _, f := range ee.CallStack {
			if f.Pos.Filename() == "<builtin>" {
				continue
			}
			frames = append(frames, f)
		}
		if len(frames) > 0 {
			b.WriteString("Traceback (most recent call last):\n")
			for _, f := range frames {
				fmt.Fprintf(&b, "  %s: in %s\n", f.Pos, f.Name)
			}
		}
		b.WriteString(kinded(ee.Msg))
	} else {
		b.WriteString(kindedError(err).Error())
	}
	return b.String()
}

// innermost returns the innermost Starlark position of err, if any, as
// "file:line:col in fn".
func innermost(err error) string {
	var ee *starlark.EvalError
	if !errors.As(err, &ee) {
		return ""
	}
	for i := len(ee.CallStack) - 1; i >= 0; i-- {
		f := ee.CallStack[i]
		if f.Pos.Filename() != "<builtin>" {
			return fmt.Sprintf("%s in %s", f.Pos, f.Name)
		}
	}
	return ""
}

// kernelError turns an error raised by Starlark code running as a task
// into an engine error that keeps its kind and says where it happened.
func kernelError(err error) error {
	if err == nil {
		return nil
	}
	k, rest := messageKind(err)
	if at := innermost(err); at != "" {
		rest = rest + " (at " + at + ")"
	}
	return &kind.Error{Kind: k, Msg: rest, Cause: err}
}

// messageKind is Message(err) split into its kind and the rest. A
// Starlark error's kind is in its message; a Go error's is its
// kind.Error's. An AssertionError, whose text keeps its own kind, is a
// RuntimeError with all of its text.
func messageKind(err error) (kind.Kind, string) {
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		msg := kinded(ee.Msg)
		if k, rest, ok := kind.Split(msg); ok {
			return k, rest
		}
		return kind.RuntimeError, msg
	}
	err = kindedError(err)
	var e *kind.Error
	if !errors.As(err, &e) {
		return kind.RuntimeError, err.Error()
	}
	return kind.Of(err), kind.Message(err)
}
