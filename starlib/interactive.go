package starlib

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	starresolve "go.starlark.net/resolve"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"simpler/engine"
)

// Interactive is the module of an interactive session (simpler repl): one
// set of globals that every chunk of input reads and extends. Each chunk
// is recorded with the loader as a module of its own ("<repl 3>"), with
// its source, so a function defined at the prompt has a digest and can be
// registered like a function of a file; a child process or a remote node,
// which has no such file, gets the statement's source with the
// registration (see locator in bundle.go).
type Interactive struct {
	s       *Session
	globals starlark.StringDict
	seq     int
}

// Chunk is one unit of interactive input: a simple statement, or a
// compound one ended by a blank line.
type Chunk struct {
	Name string // "<repl N>", as backtraces show it
	Src  []byte
	File *syntax.File
	Rest string // a line read after the chunk that starts the next one
}

// promptPrefix starts the module name of every chunk typed at the prompt.
const promptPrefix = "<repl "

// isPrompt reports whether module name is a chunk typed at the prompt.
func isPrompt(name string) bool { return strings.HasPrefix(name, promptPrefix) }

// interactiveOptions are the loader's options, with load() binding
// globally as a REPL user expects.
var interactiveOptions = &syntax.FileOptions{Set: true, While: true, TopLevelControl: true,
	GlobalReassign: true, Recursion: true, LoadBindsGlobally: true}

// Interactive returns a fresh interactive module whose globals start as
// the predeclared names plus ctx (what main(ctx) would get).
func (s *Session) Interactive() *Interactive {
	g := starlark.StringDict{}
	for k, v := range s.loader.predecl {
		g[k] = v
	}
	g["ctx"] = s.ctx()
	if s.loader.root == "" {
		s.loader.root = "."
	}
	return &Interactive{s: s, globals: g}
}

// Globals is the live global dictionary (not a copy).
func (in *Interactive) Globals() starlark.StringDict { return in.globals }

// NewThread returns a thread that prints to the session's Stdout and
// loads modules relative to the working directory.
func (in *Interactive) NewThread(name string) *starlark.Thread {
	th := in.s.newThread(name)
	th.Load = in.load(nil)
	return th
}

// load resolves load() from a chunk: relative to the working directory,
// or from the embedded library. Each module loaded is added to *loads.
func (in *Interactive) load(loads *[]string) func(*starlark.Thread, string) (starlark.StringDict, error) {
	return func(_ *starlark.Thread, path string) (starlark.StringDict, error) {
		target, err := interactiveTarget(in.s.loader.root, path)
		if err != nil {
			return nil, err
		}
		m, err := in.s.loader.load(target)
		if err != nil {
			return nil, err
		}
		if loads != nil {
			*loads = append(*loads, target)
		}
		return m.globals, nil
	}
}

// interactiveTarget maps a load() argument typed at the prompt to a
// module name: the embedded library, or a file relative to root.
func interactiveTarget(root, path string) (string, error) {
	switch {
	case strings.HasPrefix(path, stdPrefix):
		return path, nil
	case strings.HasPrefix(path, "@"):
		return "", fmt.Errorf("ValueError: cannot load %q: the only repository is %s", path, stdPrefix)
	case filepath.IsAbs(path):
		return filepath.Clean(path), nil
	}
	return filepath.Join(root, path), nil
}

// ReadChunk parses one chunk, calling readline for every line it needs:
// more lines are read while brackets are open, and a compound statement
// (def, if, for, while) continues until a blank line.
//
// A block ended by a line that is not indented, rather than by a blank
// line, does not include that line: it is returned as Rest, the start of
// the next chunk.
func (in *Interactive) ReadChunk(readline func() ([]byte, error)) (*Chunk, error) {
	in.seq++
	c := &Chunk{Name: fmt.Sprintf("%s%d>", promptPrefix, in.seq)}
	var lines [][]byte
	f, err := interactiveOptions.ParseCompoundStmt(c.Name, func() ([]byte, error) {
		line, err := readline()
		if len(line) > 0 {
			lines = append(lines, line)
		}
		return line, err
	})
	if err != nil {
		in.s.loader.keepUnparsed(c.Name, bytes.Join(lines, nil))
		return nil, err
	}
	if n := len(f.Stmts); n > 0 && len(lines) > 1 {
		_, end := f.Stmts[n-1].Span()
		last := lines[len(lines)-1]
		if int(end.Line) < len(lines) && len(bytes.TrimSpace(last)) > 0 {
			c.Rest = strings.TrimSuffix(string(last), "\n")
			lines = lines[:len(lines)-1]
		}
	}
	c.Src = bytes.Join(lines, nil)
	c.File = f
	return c, nil
}

// Empty reports whether the chunk has no statements (a blank line).
func (c *Chunk) Empty() bool { return len(c.File.Stmts) == 0 }

// Needs reports whether the chunk reads a global called name that
// neither the module nor the chunk defines, outside any function body:
// the REPL binds "orch" for such a chunk by running it as a run of its
// own.
func (in *Interactive) Needs(c *Chunk, name string) bool {
	src := c.Src
	f, err := interactiveOptions.ParseCompoundStmt(c.Name, func() ([]byte, error) {
		if len(src) == 0 {
			return nil, io.EOF
		}
		line := src
		src = nil
		return line, nil
	})
	if err != nil {
		return false
	}
	isPredeclared := func(n string) bool { return n == name }
	if err := starresolve.REPLChunk(f, in.globals.Has, isPredeclared, starlark.Universe.Has); err != nil {
		return false
	}
	found := false
	for _, stmt := range f.Stmts {
		syntax.Walk(stmt, func(n syntax.Node) bool {
			switch n := n.(type) {
			case *syntax.DefStmt, *syntax.LambdaExpr:
				return false // a function body runs later, if ever
			case *syntax.Ident:
				if b, ok := n.Binding.(*starresolve.Binding); ok && n.Name == name && b.Scope == starresolve.Predeclared {
					found = true
				}
			}
			return !found
		})
	}
	return found
}

// Exec runs a chunk on th with extra bound as globals for its duration.
// A chunk that is a single expression returns its value (also kept as
// the global "_"); other chunks return None.
func (in *Interactive) Exec(th *starlark.Thread, c *Chunk, extra starlark.StringDict) (starlark.Value, error) {
	sum := sha256.Sum256(c.Src)
	m := &module{name: c.Name, sum: hex.EncodeToString(sum[:]), src: c.Src, globals: in.globals}
	l := in.s.loader
	l.mu.Lock()
	l.modules[c.Name] = m
	l.mu.Unlock()
	var loads []string
	prevLoad := th.Load
	th.Load = in.load(&loads)
	for k, v := range extra {
		in.globals[k] = v
	}
	defer func() {
		th.Load = prevLoad
		for k := range extra {
			delete(in.globals, k)
		}
		l.mu.Lock()
		m.loads = loads
		l.mu.Unlock()
	}()
	if len(c.File.Stmts) == 1 {
		if es, ok := c.File.Stmts[0].(*syntax.ExprStmt); ok {
			v, err := starlark.EvalExprOptions(c.File.Options, th, es.X, in.globals)
			if err != nil {
				return nil, err
			}
			if v != starlark.None {
				in.globals["_"] = v
			}
			return v, nil
		}
	}
	return starlark.None, starlark.ExecREPLChunk(c.File, th, in.globals)
}

// OrchestratorMethods are the attributes of an Orchestrator (what `orch.`
// completes to, at a prompt where orch is bound only while a statement
// runs).
func OrchestratorMethods() []string { return sortedKeys(orchMethods) }

// NewOrchestrator is the `orch` value for an engine orchestrator of w's
// engine worker, as an orchestration function would receive it.
func (s *Session) NewOrchestrator(o *engine.Orchestrator, w *Worker) starlark.Value {
	return &Orchestrator{s: s, o: o, worker: w}
}
