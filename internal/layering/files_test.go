package layering

import (
	"go/token"
	"go/types"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// fileGraph is which file of a package refers to what another declares,
// as go/types resolves it (a type, a function, a method, a field, a
// constant): file -> files it uses, over the files of an ordinary build
// (no test files, no build tags); dir is relative to the module root.
func fileGraph(t *testing.T, dir string) map[string]map[string]bool {
	t.Helper()
	p := load(t, dir)
	graph := map[string]map[string]bool{}
	edge := func(at token.Pos, obj types.Object) {
		if obj == nil || obj.Pkg() != p.pkg || !obj.Pos().IsValid() {
			return
		}
		from, to := filepath.Base(p.fset.File(at).Name()), filepath.Base(p.fset.File(obj.Pos()).Name())
		if from == to {
			return
		}
		if graph[from] == nil {
			graph[from] = map[string]bool{}
		}
		graph[from][to] = true
	}
	for id, obj := range p.info.Uses {
		if obj.Parent() == nil || obj.Parent() == p.pkg.Scope() { // package level, a field or a method
			edge(id.Pos(), obj)
		}
	}
	for sel, s := range p.info.Selections {
		edge(sel.Sel.Pos(), s.Obj())
	}
	return graph
}

// cycles is every strongly connected component of more than one file
// (Tarjan's algorithm), each sorted.
func cycles(graph map[string]map[string]bool) [][]string {
	index, low, on := map[string]int{}, map[string]int{}, map[string]bool{}
	var stack []string
	var out [][]string
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = len(index), len(index)
		stack, on[v] = append(stack, v), true
		for w := range graph[v] {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if on[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] != index[v] {
			return
		}
		var comp []string
		for {
			w := stack[len(stack)-1]
			stack, on[w] = stack[:len(stack)-1], false
			comp = append(comp, w)
			if w == v {
				break
			}
		}
		if len(comp) > 1 {
			sort.Strings(comp)
			out = append(out, comp)
		}
	}
	var names []string
	for v := range graph {
		names = append(names, v)
	}
	sort.Strings(names)
	for _, v := range names {
		if _, seen := index[v]; !seen {
			visit(v)
		}
	}
	return out
}

// The core's files refer to each other without a cycle: each can be read
// knowing only the files below it.
func TestCoreHasNoFileCycle(t *testing.T) {
	graph := fileGraph(t, "engine/internal/core")
	if len(graph) < 3 {
		t.Fatalf("the core's file graph has %d files with references: the measure is broken", len(graph))
	}
	for _, c := range cycles(graph) {
		t.Errorf("the core's files %v refer to each other in a cycle", c)
	}
}

// The measure finds a cycle where there is one.
func TestCyclesFindsACycle(t *testing.T) {
	g := map[string]map[string]bool{"a": {"b": true}, "b": {"c": true}, "c": {"a": true}, "d": {"a": true}}
	if got := cycles(g); len(got) != 1 || strings.Join(got[0], " ") != "a b c" {
		t.Fatalf("cycles = %v", got)
	}
}
