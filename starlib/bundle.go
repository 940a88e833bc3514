package starlib

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.starlark.net/resolve"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"simpler/engine"
	"simpler/wire"
)

// bundle tells a child process which code its parent runs
// (wire.ChildBundle): the loader's root, and the sha256 of every module
// the parent loaded from a file, so that the child loads the same files
// and refuses any that changed on disk since. It is made with the
// Worker: what is loaded later reaches the child with each registration
// (locator).
func (s *Session) bundle() []byte {
	l := s.loader
	l.mu.Lock()
	defer l.mu.Unlock()
	names := make([]string, 0, len(l.modules))
	for n := range l.modules {
		names = append(names, n)
	}
	sort.Strings(names)
	b := wire.ChildBundle{Root: l.root}
	for _, n := range names {
		if !isPrompt(n) { // no file: a registration carries its source (locator)
			b.Modules = append(b.Modules, wire.ChildModule{Name: n, Sum: l.modules[n].sum})
		}
	}
	return wire.Payload(&b)
}

// resolver finds callables for a child process or a remote node.
type resolver struct{ s *Session }

// NewResolver makes a child's resolver from its parent's bundle. The
// child reads only the files its parent loaded, with the same checks
// (regular files within the size bound, below the parent's root; the
// bundle does not carry --load-path, so each file it names is allowed
// as itself), and refuses one whose sha256 differs.
func NewResolver(bundle []byte) (engine.Resolver, error) {
	if len(bundle) == 0 {
		return noCode{}, nil
	}
	b, err := wire.DecodeChildBundle(bundle)
	if err != nil {
		return nil, fmt.Errorf("RuntimeError: bad module bundle: %v", err)
	}
	s := NewSession("", nil, "thread", nil, os.Stdout, os.Stderr)
	s.loader.root = b.Root
	s.loader.expect = make(map[string]string, len(b.Modules)) // names are unique: the decoder checks
	for _, m := range b.Modules {
		s.loader.expect[m.Name] = m.Sum
	}
	return &resolver{s: s}, nil
}

func (r *resolver) Resolve(digest, module, name string) (engine.Callable, error) {
	loc, err := decodeLocator(module)
	if err != nil {
		return nil, fmt.Errorf("RuntimeError: %s: bad module locator: %v", name, err)
	}
	if loc.refusal != "" {
		return nil, errors.New(loc.refusal)
	}
	r.learn(loc)
	if len(loc.source) > 0 {
		if !isPrompt(loc.module) {
			return nil, fmt.Errorf("RuntimeError: %s: a source comes with a statement typed at a prompt, not with module %s", name, loc.module)
		}
		if err := r.loadPrompt(loc.module, loc.source); err != nil {
			return nil, err
		}
	}
	module = loc.module
	m, err := r.s.loader.load(module)
	if err != nil {
		return nil, err
	}
	v, ok := m.globals[name]
	if !ok {
		return nil, fmt.Errorf("RuntimeError: %s has no function %s", module, name)
	}
	fn, ok := v.(*starlark.Function)
	if !ok {
		return nil, fmt.Errorf("RuntimeError: %s.%s is a %s, not a function", module, name, v.Type())
	}
	c, err := r.s.callableFor("register", fn)
	if err != nil {
		return nil, err
	}
	if c.digest != digest {
		return nil, fmt.Errorf("RuntimeError: %s.%s here has digest %s, the parent's is %s: the code differs", module, name, c.digest, digest)
	}
	return c, nil
}

// Close releases what the resolver's session holds: the host tensors
// its callables made (a host_tensor() inside a kernel or SUB callable)
// and any worker they made. The process that resolved with it (a child,
// a remote session) calls it when it ends, once nothing runs its code.
func (r *resolver) Close() error { return r.s.Close() }

// learn adds to a child's bundle the modules a registration names that
// the bundle lacks: modules the parent loaded after the Worker was made
// (the bundle is made with it), which the child then loads with the same
// checks as the others. A module already known keeps the bundle's sum.
// A remote node, which loads only shipped sources, learns nothing.
func (r *resolver) learn(loc locator) {
	l := r.s.loader
	if l.expect == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range loc.sums {
		if _, ok := l.expect[m.Name]; !ok {
			l.expect[m.Name] = m.Sum
		}
	}
}

// loadPrompt makes module name, a statement typed at the parent's
// prompt, from the source its registration carried: there is no file to
// read. Its digest is checked by Resolve like any other.
func (r *resolver) loadPrompt(name string, src []byte) error {
	l := r.s.loader
	sum := sha256.Sum256(src)
	l.mu.Lock()
	if m, ok := l.modules[name]; ok { // an earlier registration made it
		l.mu.Unlock()
		return m.err
	}
	m := &module{name: name, sum: hex.EncodeToString(sum[:]), src: src, loading: true}
	l.modules[name] = m
	l.mu.Unlock()
	globals, err := l.exec(m, src)
	l.mu.Lock()
	m.globals, m.err, m.loading = globals, err, false
	l.mu.Unlock()
	return err
}

// noCode resolves nothing: a worker started without a module bundle (from
// Go, say) has no Starlark callables.
type noCode struct{}

func (noCode) Resolve(digest, module, name string) (engine.Callable, error) {
	loc, _ := decodeLocator(module)
	return nil, fmt.Errorf("RuntimeError: %s.%s: this worker was started without a module bundle", loc.module, name)
}

// sources is the code shipped to remote nodes: every module loaded so far
// but the embedded library, which every node has, and the statements
// typed at a prompt, which travel with the registration of a function
// they define (locator).
func (s *Session) sources() *engine.Sources {
	l := s.loader
	l.mu.Lock()
	defer l.mu.Unlock()
	src := &engine.Sources{Root: l.main}
	names := make([]string, 0, len(l.modules))
	for n := range l.modules {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !strings.HasPrefix(n, stdPrefix) && !isPrompt(n) && l.modules[n].err == nil && l.modules[n].src != nil {
			src.Modules = append(src.Modules, wire.Module{Name: n, Source: l.modules[n].src})
		}
	}
	return src
}

// Cancel stops every module load in progress (a shipped module's top
// level looping, say) and makes every later load fail at once with
// "RuntimeError: reason". A remote session calls it when its client goes
// away.
func (r *resolver) Cancel(reason string) { r.s.loader.cancel(reason) }

// NewSourceResolver makes a remote node's resolver from shipped sources:
// modules come from the shipped map only (and @simpler//), never from
// this node's disk, and each top level runs under MaxLoadSteps. Its code
// may not call the builtins that reach the host (shipped.go). The
// resolver has a Cancel method.
func NewSourceResolver(root string, modules []wire.Module) (engine.Resolver, error) {
	s := NewSession("", nil, "thread", nil, os.Stdout, os.Stderr)
	s.shipped = true // a task, not a host program (shipped.go)
	s.loader.root, s.loader.main = filepath.Dir(root), root
	s.loader.shipped = map[string][]byte{}
	for _, m := range modules {
		s.loader.shipped[m.Name] = m.Source
	}
	return &resolver{s: s}, nil
}

// SetOutput is where the print of the resolver's code goes (a remote
// session forwards it to its parent); call it before any code runs.
func (r *resolver) SetOutput(stdout, stderr io.Writer) { r.s.Stdout, r.s.Stderr = stdout, stderr }

// A callable's locator is what its registration carries to a child
// process or a remote node (engine.Locatable's Module, which the engine
// passes on unread): the module's name, then, after a NUL, what the
// receiver cannot know from the bundle it was started with. The bundle
// is made with the Worker, so it lacks whatever was loaded or typed
// since, which in the REPL is everything: w is made before the first
// prompt. The locator adds
//
//   - the sha256 of every file module the callable's module reaches, so
//     that a child loads the ones loaded after it started with the same
//     checks as the others (below a root, unchanged since the parent
//     loaded them);
//   - for a function defined at the prompt, which has no file, the
//     source of the statement that defined it; or, when that statement
//     alone would not define the same function (it reads what other
//     statements bound), why it cannot run elsewhere, which the receiver
//     reports as its refusal.
//
// A locator is at most wire.MaxName bytes, the bound of the field; a
// plain module name (no NUL) is a locator too.
type locator struct {
	module  string
	sums    []wire.ChildModule
	source  []byte // empty: the module is a file
	refusal string
}

// Module is the callable's locator.
func (c *callable) Module() string { return c.s.locator(c.fn) }

// locator describes where fn's code is, for another process.
func (s *Session) locator(fn *starlark.Function) string {
	l := s.loader
	loc := locator{module: fn.Position().Filename()}
	for _, n := range l.closure(loc.module) {
		l.mu.Lock()
		m := l.modules[n]
		l.mu.Unlock()
		switch {
		case m == nil:
		case n == loc.module && isPrompt(n):
			loc.source = m.src
		case !isPrompt(n):
			loc.sums = append(loc.sums, wire.ChildModule{Name: n, Sum: m.sum})
		}
	}
	if len(loc.source) > 0 {
		loc.refusal = promptRefusal(fn, loc.module, loc.source, l.predecl)
	}
	enc := loc.encode()
	if len(enc) > wire.MaxName && len(loc.source) > 0 {
		loc.source, loc.refusal = nil, fmt.Sprintf("ValueError: register: %s was typed at the prompt (%s), a statement of %d bytes; its registration carries it to another process, in at most %d bytes: put %s in a file and load() it",
			fn.Name(), loc.module, len(loc.source), wire.MaxName, fn.Name())
		enc = loc.encode()
	}
	if len(enc) > wire.MaxName { // too many modules: the receiver's bundle must know them
		loc.sums = nil
		enc = loc.encode()
	}
	return enc
}

func (loc *locator) encode() string {
	var e wire.Encoder
	e.String(loc.refusal)
	e.Blob(loc.source)
	e.U32(uint32(len(loc.sums)))
	for _, m := range loc.sums {
		e.String(m.Name)
		e.String(m.Sum)
	}
	return loc.module + "\x00" + string(e.Bytes())
}

func decodeLocator(s string) (locator, error) {
	name, rest, ok := strings.Cut(s, "\x00")
	loc := locator{module: name}
	if !ok {
		return loc, nil
	}
	d := wire.NewDecoder([]byte(rest))
	loc.refusal = d.StringMax(wire.MaxName)
	loc.source = d.Blob(wire.MaxName)
	n := d.Count(wire.MaxModules, 8)
	for i := 0; i < n && d.Err() == nil; i++ {
		loc.sums = append(loc.sums, wire.ChildModule{Name: d.StringMax(wire.MaxName), Sum: d.StringMax(wire.ChildSumSize)})
	}
	return loc, d.Finish()
}

// fileOptions are the options the loader executes a file module with, so
// that a prompt statement is checked as a receiver will compile it.
var fileOptions = &syntax.FileOptions{Set: true, While: true, TopLevelControl: true, Recursion: true}

// promptRefusal says why fn, defined at the prompt by statement name of
// source src, would not be the same function where src runs alone as a
// module, or returns "". At the prompt every statement reads the globals
// of the ones before; alone, src sees only the predeclared names. So fn
// cannot be sent if the statement reads a name another statement bound,
// or a predeclared name another statement rebound, or shadows a universal
// one (len = ...): such a name would be undefined, or another value.
func promptRefusal(fn *starlark.Function, name string, src []byte, predecl starlark.StringDict) string {
	f, err := fileOptions.Parse(name, src, 0)
	if err != nil { // the prompt parsed it: cannot happen
		return fmt.Sprintf("RuntimeError: register: %s (%s): %v", fn.Name(), name, err)
	}
	var foreign []string
	seen := map[string]bool{}
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			foreign = append(foreign, n)
		}
	}
	var list resolve.ErrorList
	if errors.As(resolve.File(f, predecl.Has, starlark.Universe.Has), &list) {
		for _, e := range list {
			if n, ok := strings.CutPrefix(e.Msg, "undefined: "); ok {
				n, _, _ = strings.Cut(n, " ") // "x (did you mean y?)"
				add(n)
			}
		}
	}
	here := fn.Globals() // what the statement's module bound: its own names, and what it read
	syntax.Walk(f, func(n syntax.Node) bool {
		id, ok := n.(*syntax.Ident)
		if !ok {
			return true
		}
		b, ok := id.Binding.(*resolve.Binding)
		v, bound := here[id.Name]
		switch {
		case !ok || !bound:
		case b.Scope == resolve.Universal:
			add(id.Name)
		case b.Scope == resolve.Predeclared:
			if eq, err := starlark.Equal(v, predecl[id.Name]); err != nil || !eq {
				add(id.Name)
			}
		}
		return true
	})
	if len(foreign) == 0 {
		return ""
	}
	return fmt.Sprintf("ValueError: register: %s was typed at the prompt (%s) and reads %s, bound by another statement there; another process gets only the statement that defines %s: bind what it reads in that statement too, or load() them from a file",
		fn.Name(), name, strings.Join(foreign, ", "), fn.Name())
}
