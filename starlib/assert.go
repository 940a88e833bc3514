package starlib

import (
	"fmt"
	"regexp"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"simpler/starlib/array"
)

// assertModule is the `assert` module; @simpler//testing.star exports it
// too.
var assertModule = &starlarkstruct.Module{
	Name: "assert",
	Members: starlark.StringDict{
		"eq":       builtin("assert.eq", assertEq),
		"ne":       builtin("assert.ne", assertNe),
		"true":     builtin("assert.true", assertTrue),
		"fails":    builtin("assert.fails", assertFails),
		"allclose": builtin("assert.allclose", assertAllclose),
	},
}

func assertionf(format string, args ...any) error {
	return fmt.Errorf("AssertionError: "+format, args...)
}

func assertEq(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var x, y starlark.Value
	msg := ""
	if err := starlark.UnpackArgs(b.Name(), args, kw, "a", &x, "b", &y, "msg?", &msg); err != nil {
		return nil, err
	}
	eq, err := starlark.Equal(x, y)
	if err != nil {
		return nil, err
	}
	if !eq {
		return nil, assertionf("%s%s != %s", prefix(msg), x, y)
	}
	return starlark.None, nil
}

func assertNe(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var x, y starlark.Value
	msg := ""
	if err := starlark.UnpackArgs(b.Name(), args, kw, "a", &x, "b", &y, "msg?", &msg); err != nil {
		return nil, err
	}
	eq, err := starlark.Equal(x, y)
	if err != nil {
		return nil, err
	}
	if eq {
		return nil, assertionf("%s%s == %s", prefix(msg), x, y)
	}
	return starlark.None, nil
}

func prefix(msg string) string {
	if msg == "" {
		return ""
	}
	return msg + ": "
}

func assertTrue(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var x starlark.Value
	msg := ""
	if err := starlark.UnpackArgs(b.Name(), args, kw, "x", &x, "msg?", &msg); err != nil {
		return nil, err
	}
	if !x.Truth() {
		if msg == "" {
			msg = fmt.Sprintf("%s is not true", x)
		}
		return nil, assertionf("%s", msg)
	}
	return starlark.None, nil
}

// assertFails calls fn(*args) and requires an error matching pattern.
func assertFails(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if len(args) < 2 {
		return nil, fmt.Errorf("TypeError: assert.fails: want (fn, pattern, *args)")
	}
	fn, ok := args[0].(starlark.Callable)
	if !ok {
		return nil, fmt.Errorf("TypeError: assert.fails: want a function, got %s", args[0].Type())
	}
	pat, ok := starlark.AsString(args[1])
	if !ok {
		return nil, fmt.Errorf("TypeError: assert.fails: pattern must be a string, got %s", args[1].Type())
	}
	re, err := regexp.Compile(pat)
	if err != nil {
		return nil, fmt.Errorf("ValueError: assert.fails: bad pattern: %v", err)
	}
	_, callErr := starlark.Call(th, fn, args[2:], kw)
	if callErr == nil {
		return nil, assertionf("%s succeeded; want an error matching %q", fn.Name(), pat)
	}
	if msg := Message(callErr); !re.MatchString(msg) {
		return nil, assertionf("%s failed with %q; want an error matching %q", fn.Name(), msg, pat)
	}
	return starlark.None, nil
}

func assertAllclose(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var actual, expected starlark.Value
	rtol, atol := 1e-5, 1e-8
	if err := starlark.UnpackArgs(b.Name(), args, kw, "actual", &actual, "expected", &expected, "rtol?", &rtol, "atol?", &atol); err != nil {
		return nil, err
	}
	ok, msg, err := array.AllClose(th, actual, expected, rtol, atol)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, assertionf("assert.allclose: %s", msg)
	}
	return starlark.None, nil
}
