package starlib

import (
	"errors"
	"fmt"
	"strings"

	"go.starlark.net/starlark"

	"simpler/engine"
)

// errorf returns an error whose message starts with its kind, as every
// engine error seen by scripts does.
func errorf(k engine.Kind, format string, args ...any) error {
	return engine.Errorf(k, format, args...)
}

// Message is the text a script sees for err: for a Starlark evaluation
// error its message without the backtrace. fail("ValueError: ...") reads
// as "ValueError: ...": a library written in Starlark raises kinded errors
// the way the engine does.
func Message(err error) string {
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		return withoutFail(ee.Msg)
	}
	return err.Error()
}

// withoutFail drops Starlark's "fail: " prefix when a kind follows it.
func withoutFail(msg string) string {
	if rest, ok := strings.CutPrefix(msg, "fail: "); ok {
		if _, _, kinded := engine.SplitKind(rest); kinded {
			return rest
		}
	}
	return msg
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
		b.WriteString(withoutFail(ee.Msg))
	} else {
		b.WriteString(err.Error())
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
	k, rest, ok := engine.SplitKind(Message(err))
	if !ok {
		k = engine.RuntimeError
	}
	if at := innermost(err); at != "" {
		rest = rest + " (at " + at + ")"
	}
	return &engine.Error{Kind: k, Msg: rest, Cause: err}
}
