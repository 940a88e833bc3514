package starlib

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/wire"
)

// bundle tells a child process which code its parent runs
// (wire.ChildBundle): the loader's root, and the sha256 of every module
// the parent loaded, so that the child loads the same files and refuses
// any that changed on disk since.
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
		b.Modules = append(b.Modules, wire.ChildModule{Name: n, Sum: l.modules[n].sum})
	}
	return wire.Payload(&b)
}

// Module is where a child process finds the callable: its module's name
// as the loader knows it.
func (c *callable) Module() string { return c.fn.Position().Filename() }

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

// noCode resolves nothing: a worker started without a module bundle (from
// Go, say) has no Starlark callables.
type noCode struct{}

func (noCode) Resolve(digest, module, name string) (engine.Callable, error) {
	return nil, fmt.Errorf("RuntimeError: %s.%s: this worker was started without a module bundle", module, name)
}

// sources is the code shipped to remote nodes: every module loaded so far
// but the embedded library, which every node has.
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
		if !strings.HasPrefix(n, stdPrefix) && l.modules[n].err == nil && l.modules[n].src != nil {
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
// this node's disk, and each top level runs under MaxLoadSteps. The
// resolver has a Cancel method.
func NewSourceResolver(root string, modules []wire.Module) (engine.Resolver, error) {
	s := NewSession("", nil, "thread", nil, os.Stdout, os.Stderr)
	s.loader.root, s.loader.main = filepath.Dir(root), root
	s.loader.shipped = map[string][]byte{}
	for _, m := range modules {
		s.loader.shipped[m.Name] = m.Source
	}
	return &resolver{s: s}, nil
}
