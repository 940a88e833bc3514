package engine

import (
	"errors"
	"fmt"
	"strings"
)

// Kind names the class of an error, as scripts see it ("ValueError: ...").
type Kind string

// The error kinds of the script surface.
const (
	ValueError   Kind = "ValueError"
	TypeError    Kind = "TypeError"
	RuntimeError Kind = "RuntimeError"
	KeyError     Kind = "KeyError"
	IndexError   Kind = "IndexError"
	TimeoutError Kind = "TimeoutError"
)

var kinds = []Kind{ValueError, TypeError, RuntimeError, KeyError, IndexError, TimeoutError}

// Error is an engine error of a given kind. Its text is "Kind: message".
type Error struct {
	Kind  Kind
	Msg   string
	Cause error // optional underlying error, reachable with errors.Unwrap
}

func (e *Error) Error() string { return string(e.Kind) + ": " + e.Msg }

func (e *Error) Unwrap() error { return e.Cause }

// Errorf builds an Error of kind k.
func Errorf(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// KindOf returns the kind of err: the Kind of an *Error, or the kind its text
// starts with (lower layers such as hal format messages the same way), or
// RuntimeError.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	if err != nil {
		if k, _, ok := SplitKind(err.Error()); ok {
			return k
		}
	}
	return RuntimeError
}

// SplitKind splits "ValueError: msg" into its kind and message.
func SplitKind(s string) (Kind, string, bool) {
	for _, k := range kinds {
		if rest, ok := strings.CutPrefix(s, string(k)+": "); ok {
			return k, rest, true
		}
	}
	return "", s, false
}

// Wrap prefixes err's message with context, keeping its kind: Wrap(err,
// "free") turns "ValueError: bad" into "ValueError: free: bad".
func Wrap(err error, context string) error {
	if err == nil {
		return nil
	}
	k := KindOf(err)
	_, msg, _ := SplitKind(err.Error())
	return &Error{Kind: k, Msg: context + ": " + msg, Cause: err}
}
