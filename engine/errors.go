package engine

import (
	"errors"

	"simpler/kind"
)

// The engine's error kinds are package kind's; these aliases let engine
// code and its callers keep writing Errorf(ValueError, ...).

// Kind names the class of an error, as scripts see it ("ValueError: ...").
type Kind = kind.Kind

// The error kinds of the script surface.
const (
	ValueError   = kind.ValueError
	TypeError    = kind.TypeError
	RuntimeError = kind.RuntimeError
	KeyError     = kind.KeyError
	IndexError   = kind.IndexError
	TimeoutError = kind.TimeoutError
)

// Error is an engine error of a given kind. Its text is "Kind: message".
type Error = kind.Error

// Errorf builds an Error of kind k.
func Errorf(k Kind, format string, args ...any) error {
	return kind.Errorf(k, format, args...)
}

// KindOf returns the kind of err. An error that carries a kind.Error has
// its kind (kind.Of), whatever its text says. An error that carries none
// is text from the Starlark side, and keeps the kind its text starts
// with: a Starlark EvalError's message, and the errors starlib still
// makes as text (its array package, its loader and resolver), which reach
// the engine through starlib's calls of Wrap and through the Resolver of a
// child process or a remote session. Nothing below starlib makes such an
// error; errors decoded from another process are kind.Errors again.
func KindOf(err error) Kind {
	if err == nil || typed(err) {
		return kind.Of(err)
	}
	if k, _, ok := kind.Split(err.Error()); ok {
		return k
	}
	return RuntimeError
}

// MessageOf is err's text without the kind KindOf gives it in front: what
// crosses a process or a host beside the kind, which the other side makes
// a typed Error of again.
func MessageOf(err error) string {
	if typed(err) {
		return kind.Message(err)
	}
	_, msg, _ := kind.Split(err.Error())
	return msg
}

// typed reports whether err carries a kind.Error.
func typed(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// SplitKind splits "ValueError: msg" into its kind and message: kind.Split,
// for text that crossed a boundary with its kind inside it.
func SplitKind(s string) (Kind, string, bool) { return kind.Split(s) }

// Wrap prefixes err's message with context, keeping its kind (KindOf):
// Wrap(err, "free") turns "ValueError: bad" into "ValueError: free: bad".
func Wrap(err error, context string) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: KindOf(err), Msg: context + ": " + MessageOf(err), Cause: err}
}
