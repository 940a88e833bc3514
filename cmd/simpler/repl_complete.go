package main

import (
	"sort"
	"strings"

	"go.starlark.net/starlark"

	"simpler/starlib"
)

// Tab completion of globals and attributes.

// completer completes globals, attributes and meta-commands.
type completer struct{ r *repl }

func (c completer) Do(line []rune, pos int) ([][]rune, int) {
	cands, n := complete(c.r.env.Globals(), string(line[:pos]))
	out := make([][]rune, len(cands))
	for i, s := range cands {
		out[i] = []rune(s)
	}
	return out, n
}

// complete returns the completions of the text before the cursor, as
// suffixes to insert, and the length of the word being completed.
func complete(globals starlark.StringDict, before string) ([]string, int) {
	if trimmed := strings.TrimLeft(before, " \t"); strings.HasPrefix(trimmed, ":") && !strings.ContainsAny(trimmed, " \t") {
		var names []string
		for _, c := range metaCommands {
			names = append(names, c.name)
		}
		return withPrefix(names, trimmed), len(trimmed)
	}
	i := len(before)
	for i > 0 && (isIdentByte(before[i-1]) || before[i-1] == '.') {
		i--
	}
	word := before[i:]
	if word != "" && (word[0] == '.' || (word[0] >= '0' && word[0] <= '9')) {
		return nil, 0
	}
	parts := strings.Split(word, ".")
	partial := parts[len(parts)-1]
	var names []string
	if len(parts) == 1 {
		for name := range globals {
			names = append(names, name)
		}
		for name := range starlark.Universe {
			if _, shadowed := globals[name]; !shadowed {
				names = append(names, name)
			}
		}
		names = append(names, "def", "for", "if", "load", "return", "while", "lambda", "pass", "break", "continue", "orch")
	} else if _, mine := globals["orch"]; parts[0] == "orch" && !mine && len(parts) == 2 {
		// orch is bound only while a statement runs: complete what it
		// will be.
		names = starlib.OrchestratorMethods()
	} else {
		names = attrNames(globals, parts)
	}
	return withPrefix(names, partial), len(partial)
}

// attrNames returns the attributes of the value that the dotted parts
// before the last one name, or nil.
func attrNames(globals starlark.StringDict, parts []string) []string {
	v, ok := globals[parts[0]]
	if !ok {
		v, ok = starlark.Universe[parts[0]]
	}
	if !ok {
		return nil
	}
	for _, attr := range parts[1 : len(parts)-1] {
		ha, ok := v.(starlark.HasAttrs)
		if !ok {
			return nil
		}
		next, err := ha.Attr(attr)
		if err != nil || next == nil {
			return nil
		}
		v = next
	}
	ha, ok := v.(starlark.HasAttrs)
	if !ok {
		return nil
	}
	return ha.AttrNames()
}

// withPrefix returns the sorted, distinct names that start with prefix,
// minus the prefix.
func withPrefix(names []string, prefix string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		if !strings.HasPrefix(n, prefix) || seen[n] {
			continue
		}
		if strings.HasPrefix(n, "_") && !strings.HasPrefix(prefix, "_") {
			continue // private names only when asked for
		}
		seen[n] = true
		out = append(out, n[len(prefix):])
	}
	sort.Strings(out)
	return out
}

func intValues(xs []int) []starlark.Value {
	out := make([]starlark.Value, len(xs))
	for i, x := range xs {
		out[i] = starlark.MakeInt(x)
	}
	return out
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
