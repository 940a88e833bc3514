package layering

import (
	"go/ast"
	"go/types"
	"sort"
	"strings"
	"testing"
)

// modeReaders are the only functions of package engine that may read
// Config.Mode: the check of the value, the tree's open, which makes each
// slot of the kind the mode says, and the part of it that decides whether
// child processes are needed; and the refusal of --seed in process mode,
// made before the tree opens. Everything else asks a slot.
var modeReaders = map[string]bool{
	"validate":            true,
	"tree.open":           true,
	"tree.needsProcesses": true,
	"detHooks.supported":  true,
}

// TestModeIsReadOnlyWhereSlotsAreMade fails when a function of engine
// outside modeReaders reads Config.Mode: the mode switch is to stay where
// the slots are made.
func TestModeIsReadOnlyWhereSlotsAreMade(t *testing.T) {
	p := load(t, "engine")
	readers := map[string]bool{}
	for _, f := range p.files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := funcName(fd)
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && p.isConfigMode(sel) {
					readers[name] = true
				}
				return true
			})
		}
	}
	if len(readers) == 0 {
		t.Fatal("no function reads Config.Mode: the test no longer finds the field")
	}
	var stray []string
	for name := range readers {
		if !modeReaders[name] {
			stray = append(stray, name)
		}
	}
	sort.Strings(stray)
	if len(stray) > 0 {
		t.Errorf("Config.Mode is read outside where the slots are made: %s (ask the slot instead)", strings.Join(stray, ", "))
	}
}

// isConfigMode reports whether sel is engine.Config's Mode field.
func (p *pkgInfo) isConfigMode(sel *ast.SelectorExpr) bool {
	s := p.info.Selections[sel]
	if s == nil || s.Kind() != types.FieldVal || s.Obj().Name() != "Mode" {
		return false
	}
	recv := s.Recv()
	if ptr, ok := recv.(*types.Pointer); ok {
		recv = ptr.Elem()
	}
	named, ok := recv.(*types.Named)
	return ok && named.Obj().Name() == "Config" && named.Obj().Pkg() == p.pkg
}

// funcName is "Type.method" for a method, the name for a function.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}
