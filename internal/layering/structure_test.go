package layering

import (
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// The measures of issue 27 that a reader can rerun: which files of the
// engine reference each other in a cycle (files_test.go's graph), and
// which files a submit walks through, which the test holds to the issue's
// bound. `go test ./internal/layering/ -run Structure -v` prints them.

// pkgInfo is one package of the module, type-checked from source.
type pkgInfo struct {
	fset  *token.FileSet
	files []*ast.File
	info  *types.Info
	pkg   *types.Package
}

// loaded keeps every package load has type-checked, and one importer for
// all of them, so that the packages below the engine are checked from
// source once per test binary (under -race, each check takes seconds).
var loaded struct {
	sync.Mutex
	fset *token.FileSet
	imp  types.Importer
	pkgs map[string]*pkgInfo
}

// load type-checks the non-test files of the package in dir (relative to
// the module root), once.
func load(t *testing.T, dir string) *pkgInfo {
	t.Helper()
	loaded.Lock()
	defer loaded.Unlock()
	if p := loaded.pkgs[dir]; p != nil {
		return p
	}
	if loaded.pkgs == nil {
		loaded.fset = token.NewFileSet()
		loaded.imp = importer.ForCompiler(loaded.fset, "source", nil)
		loaded.pkgs = map[string]*pkgInfo{}
	}
	fset := loaded.fset
	full := filepath.Join("..", "..", dir)
	entries, err := os.ReadDir(full)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		if ok, err := build.Default.MatchFile(full, n); err != nil || !ok {
			continue // left out of a default build (the invariants tag's file)
		}
		f, err := parser.ParseFile(fset, filepath.Join(full, n), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}, Types: map[ast.Expr]types.TypeAndValue{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: loaded.imp}
	pkg, err := conf.Check("simpler/"+dir, fset, files, info)
	if err != nil {
		t.Fatal(err)
	}
	p := &pkgInfo{fset, files, info, pkg}
	loaded.pkgs[dir] = p
	return p
}

// decls maps each function and method of the package to its declaration.
func (p *pkgInfo) decls() map[types.Object]*ast.FuncDecl {
	m := map[types.Object]*ast.FuncDecl{}
	for _, f := range p.files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				m[p.info.Defs[fd.Name]] = fd
			}
		}
	}
	return m
}

// callee is the function or method a call names statically (nil: a call
// through an interface, a function value or a builtin).
func (p *pkgInfo) callee(call *ast.CallExpr) *types.Func {
	switch fun := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		f, _ := p.info.Uses[fun].(*types.Func)
		return f
	case *ast.SelectorExpr:
		if sel := p.info.Selections[fun]; sel != nil {
			if sel.Kind() != types.MethodVal || types.IsInterface(sel.Recv()) {
				return nil
			}
			f, _ := sel.Obj().(*types.Func)
			return f
		}
		f, _ := p.info.Uses[fun.Sel].(*types.Func) // pkg.Func
		return f
	}
	return nil
}

// walk follows the calls from root in source order, entering each
// function of the package once, and returns the files of the package it
// passes through in order (a file once for each stay), and the other
// packages of the module it calls into.
//
// Three things are not a stay in another file, each because reading the
// submit there is no move to another place:
//   - a call into another package of the module: it is read by its
//     contract (the package's doc and the function's), as a call into the
//     standard library is; the packages crossed are returned beside the
//     trail, and the walk does not enter them;
//   - a call through a tool's hooks (w.race.queue, w.det.spawn,
//     w.events.emit), as an if that asks whether a tool is on is not: a
//     hook is a no-op with its tool off;
//   - a one-line accessor (oneLine), read as the expression it returns.
func (p *pkgInfo) walk(root *types.Func) (trail []string, pkgs map[string]bool) {
	decls := p.decls()
	seen := map[*types.Func]bool{}
	pkgs = map[string]bool{}
	stay := func(file string) {
		if len(trail) == 0 || trail[len(trail)-1] != file {
			trail = append(trail, file)
		}
	}
	var enter func(f *types.Func)
	enter = func(f *types.Func) {
		seen[f] = true
		if f.Pkg() != p.pkg {
			pkgs[f.Pkg().Path()] = true
			return
		}
		d := decls[f]
		if d == nil || p.oneLine(d) {
			return
		}
		file := filepath.Base(p.fset.Position(f.Pos()).Filename)
		stay(file)
		var visit func(n ast.Node) bool
		visit = func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncLit:
				return false // a closure runs later, elsewhere
			case *ast.IfStmt:
				if p.offPath(n) { // its condition runs; its body is off the path
					if n.Init != nil {
						ast.Inspect(n.Init, visit)
					}
					ast.Inspect(n.Cond, visit)
					return false
				}
			case *ast.ReturnStmt:
				if p.failing(n) {
					return false
				}
			case *ast.CallExpr:
				if toolHook(n) {
					return false
				}
				if g := p.callee(n); g != nil && !seen[g] && g.Pkg() != nil && strings.HasPrefix(g.Pkg().Path(), "simpler") {
					enter(g)
					stay(file)
				}
			}
			return true
		}
		ast.Inspect(d.Body, visit)
	}
	enter(root)
	return trail, pkgs
}

// toolNames are the fields and names by which the engine asks whether a
// tool is on, or calls its hooks: --race, --seed, an observer of events,
// the invariants build.
var toolNames = map[string]bool{"invariants": true, "Race": true, "Det": true, "race": true, "det": true, "observer": true, "observed": true, "events": true}

// toolHook reports whether call goes through a tool's hooks: its
// receiver is a field that names a tool (w.race.queue(n)).
func toolHook(call *ast.CallExpr) bool {
	sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	if !ok {
		return false
	}
	recv, ok := ast.Unparen(sel.X).(*ast.SelectorExpr)
	return ok && toolNames[recv.Sel.Name]
}

// oneLine reports whether d is a one-line accessor: a body of one
// statement that calls no function of the module (a field, a comparison,
// a builtin: `return h.released.Load()`, `clear(b.mem())`).
func (p *pkgInfo) oneLine(d *ast.FuncDecl) bool {
	if len(d.Body.List) != 1 {
		return false
	}
	calls := false
	ast.Inspect(d.Body, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if g := p.callee(c); g != nil && g.Pkg() != nil && strings.HasPrefix(g.Pkg().Path(), "simpler") {
				calls = true
			}
		}
		return !calls
	})
	return !calls
}

// offPath reports whether an if statement's body is off a successful
// local submit's path with the tools off: its condition asks whether a
// tool (--race, --seed, an observer, the invariants build) is on, or
// whether a task's arguments are a remote node's (TaskArgs.Remote, nil
// for every local task), or its body ends by returning an error.
func (p *pkgInfo) offPath(s *ast.IfStmt) bool {
	tool := false
	ast.Inspect(s.Cond, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && toolNames[id.Name] {
			tool = true
		}
		if sel, ok := n.(*ast.SelectorExpr); ok && p.remoteArgs(sel) {
			tool = true
		}
		return true
	})
	if tool {
		return true
	}
	if len(s.Body.List) == 0 {
		return false
	}
	ret, ok := s.Body.List[len(s.Body.List)-1].(*ast.ReturnStmt)
	return ok && p.failing(ret)
}

// remoteArgs reports whether sel reads the remote places of a task's
// arguments (a TaskArgs' Remote field).
func (p *pkgInfo) remoteArgs(sel *ast.SelectorExpr) bool {
	if sel.Sel.Name != "Remote" {
		return false
	}
	t := p.info.TypeOf(sel.X)
	if ptr, ok := t.(*types.Pointer); ok {
		t = ptr.Elem()
	}
	named, ok := t.(*types.Named)
	return ok && named.Obj().Name() == "TaskArgs"
}

// failing reports whether a return statement returns an error that is not
// nil: a refusal, not the path of a submit that succeeds.
func (p *pkgInfo) failing(r *ast.ReturnStmt) bool {
	if len(r.Results) == 0 {
		return false
	}
	last := r.Results[len(r.Results)-1]
	if id, ok := last.(*ast.Ident); ok && id.Name == "nil" {
		return false
	}
	tv, ok := p.info.Types[last]
	return ok && types.Identical(tv.Type, types.Universe.Lookup("error").Type())
}

// returns counts, per file, how often a trail comes back to it after
// leaving it.
func returns(trail []string) map[string]int {
	seen, back := map[string]bool{}, map[string]int{}
	for _, f := range trail {
		if seen[f] {
			back[f]++
		}
		seen[f] = true
	}
	return back
}

// method finds a method of a named type of p.
func (p *pkgInfo) method(typ, name string) *types.Func {
	obj := p.pkg.Scope().Lookup(typ)
	if obj == nil {
		return nil
	}
	m, _, _ := types.LookupFieldOrMethod(types.NewPointer(obj.Type()), true, p.pkg, name)
	f, _ := m.(*types.Func)
	return f
}

// TestStructureMeasures prints the engine's file cycles: the measure the
// issue quotes ("27 of 36 files in one cycle").
func TestStructureMeasures(t *testing.T) {
	g := fileGraph(t, "engine")
	cs := cycles(g)
	sort.Slice(cs, func(i, j int) bool { return len(cs[i]) > len(cs[j]) })
	if len(g) < 10 {
		t.Fatalf("engine has %d files?", len(g))
	}
	largest := 0
	if len(cs) > 0 {
		largest = len(cs[0])
		t.Logf("engine: the largest file cycle has %d of %d files: %s", largest, len(g), strings.Join(cs[0], " "))
	}
	p := load(t, "engine")
	submit := p.method("Orchestrator", "SubmitNext")
	if submit == nil {
		t.Fatal("no Orchestrator.SubmitNext")
	}
	trail, pkgs := p.walk(submit)
	files := map[string]bool{}
	for _, f := range trail {
		files[f] = true
	}
	back, total := returns(trail), 0
	for _, n := range back {
		total += n
	}
	var crossed []string
	for path := range pkgs {
		crossed = append(crossed, path)
	}
	sort.Strings(crossed)
	t.Logf("a submit walks %d files of engine, comes back %d times %v: %s; it calls into %v", len(files), total, back, strings.Join(trail, " > "), crossed)
	// Issue 27's bound: a submit's walk through at most 8 files, with no
	// return to a file already left more than twice.
	if len(files) > 8 {
		t.Errorf("a submit walks %d files of engine; at most 8", len(files))
	}
	for f, n := range back {
		if n > 2 {
			t.Errorf("a submit comes back to %s %d times; at most twice", f, n)
		}
	}
	// Remote buffers and the tools are off a local submit's path: it
	// reaches them only through a branch on a remote node's arguments or a
	// tool's hooks.
	for _, f := range []string{"rbuf.go", "remote.go", "race.go", "det.go", "event.go"} {
		if files[f] {
			t.Errorf("a local submit walks through %s", f)
		}
	}
}
