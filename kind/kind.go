// Package kind is the error kinds of simpler's script surface, as types.
//
// Every error a script sees starts with its kind: "ValueError: ...",
// "TypeError: ...". Below the Starlark binding an error carries its kind
// as a value, an *Error, and code asks for it with Of: it never reads a
// kind out of an error's text. Text is only where a kind arrives as text:
// an error from another process or host (a wire ErrorBody, whose decoder
// rebuilds an *Error from its kind field) and a Starlark error message
// (fail("ValueError: ..."), an EvalError), which the binding splits with
// Split. The package imports only the standard library, so every layer
// (hal, engine, starlib) can use it.
package kind

import (
	"errors"
	"fmt"
	"strings"
)

// Kind names the class of an error, as scripts see it ("ValueError").
type Kind string

// The error kinds of the script surface.
const (
	ValueError   Kind = "ValueError"
	TypeError    Kind = "TypeError"
	RuntimeError Kind = "RuntimeError"
	KeyError     Kind = "KeyError"
	IndexError   Kind = "IndexError"
	TimeoutError Kind = "TimeoutError"
	SyntaxError  Kind = "SyntaxError" // a script or module that does not parse
	NameError    Kind = "NameError"   // a name defined nowhere, or read before it is bound
)

var kinds = []Kind{ValueError, TypeError, RuntimeError, KeyError, IndexError, TimeoutError, SyntaxError, NameError}

// Known reports whether k is one of the kinds above: a decoder checks a
// kind it received before it makes an Error of it.
func Known(k Kind) bool {
	for _, x := range kinds {
		if x == k {
			return true
		}
	}
	return false
}

// Error is an error of a given kind. Its text is "Kind: Msg".
type Error struct {
	Kind  Kind
	Msg   string
	Cause error // optional underlying error, reachable with errors.Unwrap
}

func (e *Error) Error() string { return string(e.Kind) + ": " + e.Msg }

func (e *Error) Unwrap() error { return e.Cause }

// New returns an Error of kind k with message msg.
func New(k Kind, msg string) error {
	return &Error{Kind: k, Msg: msg}
}

// Errorf returns an Error of kind k whose message is format applied to
// args. A %w in format wraps its operand as fmt.Errorf does, so that
// errors.Is and errors.As still reach it (through Cause).
func Errorf(k Kind, format string, args ...any) error {
	if !strings.Contains(format, "%w") {
		return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
	}
	w := fmt.Errorf(format, args...)
	return &Error{Kind: k, Msg: w.Error(), Cause: w}
}

// Of returns the kind of err: the Kind of the first *Error in its chain
// (errors.As), or RuntimeError when there is none. It never looks at the
// text.
func Of(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return RuntimeError
}

// Message returns err's text without the "Kind: " of its kind Of(err) in
// front: the half of an error that crosses a wire beside its kind. An
// error that wraps an *Error under text of its own ("releasing: ...")
// keeps all of its text.
func Message(err error) string {
	if e, ok := err.(*Error); ok {
		return e.Msg
	}
	s := err.Error()
	if rest, ok := strings.CutPrefix(s, string(Of(err))+": "); ok {
		return rest
	}
	return s
}

// Wrap prefixes err's message with context, keeping its kind: Wrap(err,
// "free") turns "ValueError: bad" into "ValueError: free: bad". The
// result wraps err. Wrap(nil, ...) is nil.
func Wrap(err error, context string) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: Of(err), Msg: context + ": " + Message(err), Cause: err}
}

// Split splits "ValueError: msg" into its kind and message; ok is false
// when s does not start with a known kind. It is only for text that
// crossed a boundary with its kind inside it (a Starlark error message, an
// error from another process): an error made in this process is an
// *Error, and Of gives its kind.
func Split(s string) (k Kind, msg string, ok bool) {
	for _, k := range kinds {
		if rest, ok := strings.CutPrefix(s, string(k)+": "); ok {
			return k, rest, true
		}
	}
	return "", s, false
}
