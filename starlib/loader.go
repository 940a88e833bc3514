package starlib

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

//go:embed stdlib/*.star
var stdlib embed.FS

// stdPrefix names modules of the embedded standard library.
const stdPrefix = "@simpler//"

// module is one loaded file.
type module struct {
	name    string // as shown in backtraces: relative path, or @simpler//x.star
	sum     string // sha256 of the source
	src     []byte
	loads   []string
	globals starlark.StringDict
	err     error
	loading bool
}

// loader loads modules once each, detects cycles, and remembers every
// source so a callable's digest covers the code it can reach.
type loader struct {
	mu      sync.Mutex
	modules map[string]*module
	stack   []string          // modules being loaded, outermost first
	root    string            // directory of the main script: digests name modules relative to it
	main    string            // the main script's module name
	expect  map[string]string // in a child: each module's sha256 in the parent
	shipped map[string][]byte // on a remote node: the parent's sources, by module name
	predecl starlark.StringDict
	print   func(*starlark.Thread, string)
}

func newLoader(predecl starlark.StringDict, print func(*starlark.Thread, string)) *loader {
	return &loader{modules: map[string]*module{}, predecl: predecl, print: print}
}

// loadingKey marks a thread that is executing module top-level code.
const loadingKey = "simpler.loading"

// resolveLoad maps a load() argument, relative to the loading module, to a
// module name.
func resolveLoad(from, path string) (string, error) {
	if strings.HasPrefix(path, stdPrefix) {
		return path, nil
	}
	if strings.HasPrefix(path, "@") {
		return "", fmt.Errorf("ValueError: cannot load %q: the only repository is %s", path, stdPrefix)
	}
	if filepath.IsAbs(path) || strings.HasPrefix(from, stdPrefix) {
		return filepath.Clean(path), nil
	}
	return filepath.Join(filepath.Dir(from), path), nil
}

func (l *loader) source(name string) ([]byte, error) {
	if l.shipped != nil && !strings.HasPrefix(name, stdPrefix) {
		if src, ok := l.shipped[name]; ok {
			return src, nil
		}
		return nil, fmt.Errorf("ValueError: module %s was not shipped with the session", name)
	}
	if rest, ok := strings.CutPrefix(name, stdPrefix); ok {
		b, err := stdlib.ReadFile("stdlib/" + rest)
		if err != nil {
			return nil, fmt.Errorf("ValueError: no module %s in the standard library", name)
		}
		return b, nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("ValueError: %v", unwrapPathError(err))
	}
	return b, nil
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// load executes module name (once) and returns its globals.
func (l *loader) load(name string) (*module, error) {
	l.mu.Lock()
	m, ok := l.modules[name]
	if ok {
		l.mu.Unlock()
		if m.loading {
			l.mu.Lock()
			path := strings.Join(append(l.cycleFrom(name), name), " -> ")
			l.mu.Unlock()
			return nil, fmt.Errorf("ValueError: load cycle: %s", path)
		}
		return m, m.err
	}
	m = &module{name: name, loading: true}
	l.modules[name] = m
	l.stack = append(l.stack, name)
	l.mu.Unlock()

	src, err := l.source(name)
	if err == nil {
		sum := sha256.Sum256(src)
		m.sum = hex.EncodeToString(sum[:])
		m.src = src
		if want, ok := l.expect[name]; l.expect != nil && (!ok || want != m.sum) {
			err = fmt.Errorf("RuntimeError: module %s changed on disk since simpler started (sha256 %.12s..., was %.12s...); restart to run the new code", name, m.sum, want)
		}
	}
	if err == nil {
		m.globals, err = l.exec(m, src)
	}
	l.mu.Lock()
	m.err, m.loading = err, false
	l.stack = l.stack[:len(l.stack)-1]
	l.mu.Unlock()
	return m, err
}

// cycleFrom returns the part of the load stack that starts at name.
func (l *loader) cycleFrom(name string) []string {
	for i, n := range l.stack {
		if n == name {
			return append([]string(nil), l.stack[i:]...)
		}
	}
	return nil
}

func (l *loader) exec(m *module, src []byte) (starlark.StringDict, error) {
	th := &starlark.Thread{Name: "load " + m.name, Print: l.print}
	th.SetLocal(loadingKey, true)
	th.Load = func(th *starlark.Thread, path string) (starlark.StringDict, error) {
		target, err := resolveLoad(m.name, path)
		if err != nil {
			return nil, err
		}
		dep, err := l.load(target)
		if err != nil {
			return nil, err
		}
		m.loads = append(m.loads, target)
		return dep.globals, nil
	}
	opts := &syntax.FileOptions{Set: true, While: true, TopLevelControl: true, GlobalReassign: false, Recursion: true}
	return starlark.ExecFileOptions(opts, th, m.name, src, l.predecl)
}

// closure returns the sorted names of m and every module it loads,
// directly or not.
func (l *loader) closure(name string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	var walk func(string)
	walk = func(n string) {
		if seen[n] {
			return
		}
		seen[n] = true
		if m := l.modules[n]; m != nil {
			for _, d := range m.loads {
				walk(d)
			}
		}
	}
	walk(name)
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// digest identifies function fn of module name by the sources it can
// reach: the same code gives the same digest in every process.
func (l *loader) digest(name, fn string) string {
	h := sha256.New()
	fmt.Fprintf(h, "simpler-callable-v1\x00%s\x00%s\x00", l.rel(name), fn)
	for _, n := range l.closure(name) {
		l.mu.Lock()
		sum := l.modules[n].sum
		l.mu.Unlock()
		fmt.Fprintf(h, "%s\x00%s\x00", l.rel(n), sum)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// rel names a module relative to the main script's directory, so that a
// bundle has the same digests wherever it is unpacked.
func (l *loader) rel(name string) string {
	if strings.HasPrefix(name, stdPrefix) {
		return name
	}
	if r, err := filepath.Rel(l.root, name); err == nil {
		return filepath.ToSlash(r)
	}
	return name
}
