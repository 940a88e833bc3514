package kind

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestErrorText(t *testing.T) {
	err := Errorf(ValueError, "x %d", 3)
	if err.Error() != "ValueError: x 3" {
		t.Errorf("Errorf: %q", err)
	}
	if got := New(KeyError, "k"); got.Error() != "KeyError: k" {
		t.Errorf("New: %q", got)
	}
	var e *Error
	if !errors.As(err, &e) || e.Kind != ValueError || e.Msg != "x 3" || e.Cause != nil {
		t.Errorf("Errorf made %#v", e)
	}
}

func TestErrorfWraps(t *testing.T) {
	err := Errorf(RuntimeError, "host memory: %w", fs.ErrNotExist)
	if err.Error() != "RuntimeError: host memory: "+fs.ErrNotExist.Error() {
		t.Errorf("text %q", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%v does not wrap fs.ErrNotExist", err)
	}
	inner := Errorf(ValueError, "inner")
	outer := Errorf(TimeoutError, "outer: %w", inner)
	if Of(outer) != TimeoutError || !errors.Is(outer, inner) {
		t.Errorf("Of(%v) = %s, or it does not wrap inner", outer, Of(outer))
	}
}

func TestOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want Kind
	}{
		{nil, RuntimeError},
		{errors.New("no kind"), RuntimeError},
		{errors.New("ValueError: text is not a kind"), RuntimeError}, // Of never reads text
		{Errorf(IndexError, "i"), IndexError},
		{fmt.Errorf("context: %w", Errorf(KeyError, "k")), KeyError},
		{fmt.Errorf("%w (undoing it: %v)", Errorf(TimeoutError, "t"), errors.New("x")), TimeoutError},
		{errors.Join(errors.New("plain"), Errorf(TypeError, "t")), TypeError},
		{Wrap(Errorf(ValueError, "v"), "ctx"), ValueError},
	} {
		if got := Of(c.err); got != c.want {
			t.Errorf("Of(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

func TestMessage(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{Errorf(ValueError, "bad"), "bad"},
		{fmt.Errorf("%w (undoing it: x)", Errorf(ValueError, "bad")), "bad (undoing it: x)"},
		{fmt.Errorf("releasing: %w", Errorf(ValueError, "bad")), "releasing: ValueError: bad"},
		{errors.New("plain"), "plain"},
	} {
		if got := Message(c.err); got != c.want {
			t.Errorf("Message(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestWrap(t *testing.T) {
	if Wrap(nil, "ctx") != nil {
		t.Error("Wrap(nil) is not nil")
	}
	inner := Errorf(ValueError, "bad")
	err := Wrap(inner, "free")
	if err.Error() != "ValueError: free: bad" || Of(err) != ValueError || !errors.Is(err, inner) {
		t.Errorf("Wrap: %q, kind %s", err, Of(err))
	}
	if err := Wrap(Wrap(inner, "b"), "a"); err.Error() != "ValueError: a: b: bad" {
		t.Errorf("Wrap twice: %q", err)
	}
	// An error without a kind is a RuntimeError, its text the message.
	plain := fmt.Errorf("shm: %w", fs.ErrExist)
	if err := Wrap(plain, "ctx"); err.Error() != "RuntimeError: ctx: "+plain.Error() || !errors.Is(err, fs.ErrExist) {
		t.Errorf("Wrap of a plain error: %q", err)
	}
}

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		s    string
		k    Kind
		msg  string
		isOK bool
	}{
		{"ValueError: x: y", ValueError, "x: y", true},
		{"TimeoutError: slow", TimeoutError, "slow", true},
		{"AssertionError: no", "", "AssertionError: no", false},
		{"ValueError:x", "", "ValueError:x", false},
		{"plain", "", "plain", false},
	} {
		k, msg, ok := Split(c.s)
		if k != c.k || msg != c.msg || ok != c.isOK {
			t.Errorf("Split(%q) = %q, %q, %v; want %q, %q, %v", c.s, k, msg, ok, c.k, c.msg, c.isOK)
		}
	}
}

func TestKnown(t *testing.T) {
	for _, k := range []Kind{ValueError, TypeError, RuntimeError, KeyError, IndexError, TimeoutError} {
		if !Known(k) {
			t.Errorf("%s is not known", k)
		}
	}
	if Known("AssertionError") || Known("") {
		t.Error("an unknown kind is known")
	}
}
