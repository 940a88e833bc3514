package starlib

import (
	"fmt"
	"math/big"
	"strings"

	"go.starlark.net/starlark"

	"simpler/kind"
)

// fmtBuiltin is fmt(format, *values): printf-style formatting with the
// width and precision Starlark's % operator lacks ("%6.2f" % x fails).
// A directive is %[flags][width][.precision]verb, flags among "-+ 0",
// verbs d (int), f e g (number), x X o (int), s (str of any value), r
// (repr) and %% for a percent sign. Each value must suit its verb and
// every value must be used: a mismatch is a TypeError, as in Python.
func fmtBuiltin(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if len(kw) > 0 {
		return nil, kind.Errorf(kind.TypeError, "fmt: takes no keyword arguments")
	}
	if len(args) == 0 {
		return nil, kind.Errorf(kind.TypeError, "fmt: want a format string")
	}
	format, ok := starlark.AsString(args[0])
	if !ok {
		return nil, kind.Errorf(kind.TypeError, "fmt: the format must be a string, got %s", args[0].Type())
	}
	out, err := formatValues(format, args[1:])
	if err != nil {
		return nil, err
	}
	return starlark.String(out), nil
}

// formatValues applies format to values, one directive at a time.
func formatValues(format string, values starlark.Tuple) (string, error) {
	var b strings.Builder
	next := 0
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		d, end, err := parseDirective(format, i+1)
		if err != nil {
			return "", err
		}
		i = end
		if d.verb == '%' {
			b.WriteByte('%')
			continue
		}
		if next >= len(values) {
			return "", kind.Errorf(kind.TypeError, "fmt: not enough values for %q", format)
		}
		s, err := d.apply(values[next])
		if err != nil {
			return "", err
		}
		b.WriteString(s)
		next++
	}
	if next < len(values) {
		return "", kind.Errorf(kind.TypeError, "fmt: %d values for %q, which uses %d", len(values), format, next)
	}
	return b.String(), nil
}

// directive is one parsed %-directive: its flags, width and precision
// as Go's fmt spells them, and its verb.
type directive struct {
	spec string // "%-8.3" without the verb
	verb byte
}

// parseDirective reads the directive that starts at format[i] (just
// after its '%'); end is the index of its verb.
func parseDirective(format string, i int) (d directive, end int, err error) {
	start := i
	for i < len(format) && strings.IndexByte("-+ 0", format[i]) >= 0 {
		i++
	}
	for i < len(format) && format[i] >= '0' && format[i] <= '9' {
		i++
	}
	if i < len(format) && format[i] == '.' {
		i++
		for i < len(format) && format[i] >= '0' && format[i] <= '9' {
			i++
		}
	}
	if i >= len(format) {
		return d, 0, kind.Errorf(kind.ValueError, "fmt: %q ends inside a directive", format)
	}
	verb := format[i]
	if strings.IndexByte("dfegxXosr%", verb) < 0 {
		return d, 0, kind.Errorf(kind.ValueError, "fmt: unknown verb %%%c in %q (want d, f, e, g, x, X, o, s, r or %%)", verb, format)
	}
	if verb == '%' && i != start {
		return d, 0, kind.Errorf(kind.ValueError, "fmt: %%%% takes no width or precision, in %q", format)
	}
	return directive{spec: "%" + format[start:i], verb: verb}, i, nil
}

// apply formats v by the directive.
func (d directive) apply(v starlark.Value) (string, error) {
	switch d.verb {
	case 'd', 'x', 'X', 'o':
		i, ok := v.(starlark.Int)
		if !ok {
			return "", kind.Errorf(kind.TypeError, "fmt: %%%c wants an int, got %s", d.verb, v.Type())
		}
		return fmt.Sprintf(d.spec+string(d.verb), i.BigInt()), nil
	case 'f', 'e', 'g':
		var x float64
		switch n := v.(type) {
		case starlark.Float:
			x = float64(n)
		case starlark.Int:
			f, _ := new(big.Float).SetInt(n.BigInt()).Float64()
			x = f
		default:
			return "", kind.Errorf(kind.TypeError, "fmt: %%%c wants a number, got %s", d.verb, v.Type())
		}
		return fmt.Sprintf(d.spec+string(d.verb), x), nil
	case 's':
		if s, ok := starlark.AsString(v); ok {
			return fmt.Sprintf(d.spec+"s", s), nil
		}
		return fmt.Sprintf(d.spec+"s", v.String()), nil
	default: // 'r'
		return fmt.Sprintf(d.spec+"s", v.String()), nil
	}
}
