package starlib

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"go.starlark.net/resolve"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"simpler/engine"
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

// MaxModuleSize bounds the source of one module, the main script
// included: a file above it is refused before it is read.
const MaxModuleSize = 4 << 20

// MaxLoadSteps bounds the Starlark steps of one module's top-level code,
// so that a loop there fails instead of spinning for ever (on a remote
// daemon, for every session that ships the module). A top level only
// defines things; 0 means no bound.
var MaxLoadSteps uint64 = 10_000_000

// loader loads modules once each, detects cycles, and remembers every
// source so a callable's digest covers the code it can reach.
//
// Files are read only below the load roots: root, the --load-path
// directories, and in a child the files its parent loaded.
type loader struct {
	mu       sync.Mutex
	modules  map[string]*module
	stack    []string                  // modules being loaded, outermost first
	root     string                    // directory of the main script: digests name modules relative to it
	main     string                    // the main script's module name
	loadPath []string                  // more directories load() may read below (absolute)
	expect   map[string]string         // in a child: each module's sha256 in the parent
	shipped  map[string][]byte         // on a remote node: the parent's sources, by module name
	maxSteps uint64                    // --max-steps, 0 for none: also bounds a module's top level
	running  map[*starlark.Thread]bool // threads executing a module's top level
	canceled string                    // set by cancel: why every later load fails
	predecl  starlark.StringDict
	print    func(*starlark.Thread, string)
	unparsed map[string][]byte // REPL chunks that did not parse, for their error's source line
}

func newLoader(predecl starlark.StringDict, print func(*starlark.Thread, string)) *loader {
	return &loader{modules: map[string]*module{}, running: map[*starlark.Thread]bool{}, predecl: predecl, print: print}
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

// source returns the text of module name, which a script wrote as
// written (for messages).
func (l *loader) source(name, written string) ([]byte, error) {
	if l.shipped != nil && !strings.HasPrefix(name, stdPrefix) {
		src, ok := l.shipped[name]
		switch {
		case !ok:
			return nil, fmt.Errorf("ValueError: module %s was not shipped with the session", name)
		case len(src) > MaxModuleSize:
			return nil, fmt.Errorf("ValueError: shipped module %s is %d bytes, above the bound of %d", name, len(src), MaxModuleSize)
		}
		return src, nil
	}
	if rest, ok := strings.CutPrefix(name, stdPrefix); ok {
		b, err := stdlib.ReadFile("stdlib/" + rest)
		if err != nil {
			return nil, fmt.Errorf("ValueError: no module %s in the standard library", name)
		}
		return b, nil
	}
	if _, ok := l.expect[name]; l.expect != nil && !ok {
		// A child runs only the parent's code: nothing else is read.
		return nil, fmt.Errorf("RuntimeError: module %s was not loaded by the parent process", name)
	}
	what := quoteLoad(written, name)
	path, err := l.confine(name, what)
	if err != nil {
		return nil, fmt.Errorf("%w%s", err, nearScript(name))
	}
	return readModule(path, what)
}

// nearScript suggests the .star file a user probably meant when module
// name does not exist ("first.sta", "first" for first.star), or returns
// "".
func nearScript(name string) string {
	if _, err := os.Stat(name); !errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	guess := strings.TrimSuffix(name, filepath.Ext(name)) + ".star"
	if guess == name {
		return ""
	}
	if fi, err := os.Stat(guess); err == nil && fi.Mode().IsRegular() {
		return fmt.Sprintf(" (did you mean %s?)", guess)
	}
	return ""
}

// quoteLoad names a module in a refusal: the path as the script wrote
// it, and the module it resolved to when that reads differently.
func quoteLoad(written, name string) string {
	if filepath.Clean(written) == name {
		return fmt.Sprintf("%q", written)
	}
	return fmt.Sprintf("%q (%s)", written, name)
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// roots returns the directories (or, in a child, files) that modules
// may be read from.
func (l *loader) roots() []string {
	root := l.root
	if root == "" {
		root = "."
	}
	roots := append([]string{root}, l.loadPath...)
	for name := range l.expect {
		// The bundle names every file the parent loaded, but not the
		// parent's --load-path: each file is a root of its own (its
		// sha256 must match anyway).
		if !strings.HasPrefix(name, stdPrefix) {
			roots = append(roots, name)
		}
	}
	return roots
}

// confine returns the real path of module file name after checking that
// it lies below a load root, both as written and with every symlink
// resolved. The main script is exempt: it defines the root.
func (l *loader) confine(name, what string) (string, error) {
	if name != l.main {
		abs, err := filepath.Abs(name)
		if err != nil || !below(abs, l.roots(), false) {
			return "", fmt.Errorf("ValueError: cannot load %s: outside the load roots (the main script's directory and any --load-path directory)", what)
		}
	}
	real, err := filepath.EvalSymlinks(name)
	if err != nil {
		return "", fmt.Errorf("ValueError: cannot load %s: %v", what, unwrapPathError(err))
	}
	if real, err = filepath.Abs(real); err != nil {
		return "", fmt.Errorf("ValueError: cannot load %s: %v", what, err)
	}
	if name != l.main && !below(real, l.roots(), true) {
		return "", fmt.Errorf("ValueError: cannot load %s: a symlink leads to %s, outside the load roots", what, real)
	}
	return real, nil
}

// below reports whether absolute path p is one of roots or lies below
// one. Roots are compared as written and with their symlinks resolved;
// with realOnly, only resolved.
func below(p string, roots []string, realOnly bool) bool {
	for _, r := range roots {
		var forms []string
		if abs, err := filepath.Abs(r); err == nil && !realOnly {
			forms = append(forms, abs)
		}
		if real, err := filepath.EvalSymlinks(r); err == nil {
			if real, err = filepath.Abs(real); err == nil {
				forms = append(forms, real)
			}
		}
		for _, f := range forms {
			if rel, err := filepath.Rel(f, p); err == nil && filepath.IsLocal(rel) || p == f {
				return true
			}
		}
	}
	return false
}

// readModule reads the module file at path, which has no symlinks left:
// a regular file of at most MaxModuleSize bytes. The type is checked
// before opening (opening a device can act on it) and again on the open
// file, which is opened without following a symlink and without waiting
// (a fifo would block), so a file swapped in between is refused too.
func readModule(path, what string) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("ValueError: cannot load %s: %v", what, unwrapPathError(err))
	}
	if err := regularModule(fi, what); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("ValueError: cannot load %s: %v", what, unwrapPathError(err))
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("ValueError: cannot load %s: %v", what, err)
	}
	if err := regularModule(fi, what); err != nil {
		return nil, err
	}
	if opened, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd())); err == nil && opened != path {
		// A directory on the way was swapped for a symlink after it
		// was checked (Linux tells where the open file really is).
		return nil, fmt.Errorf("ValueError: cannot load %s: it moved to %s while being loaded", what, opened)
	}
	// Read through a limit: a file still growing cannot exceed it.
	b, err := io.ReadAll(io.LimitReader(f, MaxModuleSize+1))
	if err != nil {
		return nil, fmt.Errorf("ValueError: cannot load %s: %v", what, unwrapPathError(err))
	}
	if len(b) > MaxModuleSize {
		return nil, fmt.Errorf("ValueError: cannot load %s: it grew above %d bytes while being read", what, MaxModuleSize)
	}
	return b, nil
}

// regularModule refuses anything but a regular file within the size
// bound.
func regularModule(fi fs.FileInfo, what string) error {
	kind := ""
	switch mode := fi.Mode(); {
	case mode.IsRegular():
		if fi.Size() > MaxModuleSize {
			return fmt.Errorf("ValueError: cannot load %s: it is %d bytes, above the bound of %d (4 MiB) for a module", what, fi.Size(), MaxModuleSize)
		}
		return nil
	case mode.IsDir():
		kind = "a directory"
	case mode&fs.ModeSymlink != 0:
		kind = "a symlink"
	case mode&fs.ModeNamedPipe != 0:
		kind = "a fifo"
	case mode&fs.ModeSocket != 0:
		kind = "a socket"
	case mode&fs.ModeCharDevice != 0:
		kind = "a character device"
	case mode&fs.ModeDevice != 0:
		kind = "a block device"
	default:
		kind = "of an unknown kind"
	}
	return fmt.Errorf("ValueError: cannot load %s: not a regular file (%s)", what, kind)
}

// load executes module name (once) and returns its globals.
func (l *loader) load(name string) (*module, error) { return l.loadAs(name, name) }

// loadAs is load of a module a script wrote as written.
func (l *loader) loadAs(name, written string) (*module, error) {
	l.mu.Lock()
	if l.canceled != "" {
		l.mu.Unlock()
		return nil, errors.New(l.canceled)
	}
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

	src, err := l.source(name, written)
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
	l.boundLoad(th, m.name)
	th.Load = func(th *starlark.Thread, path string) (starlark.StringDict, error) {
		target, err := resolveLoad(m.name, path)
		if err != nil {
			return nil, err
		}
		dep, err := l.loadAs(target, path)
		if err != nil {
			return nil, err
		}
		m.loads = append(m.loads, target)
		return dep.globals, nil
	}
	if err := l.start(th); err != nil {
		return nil, err
	}
	defer l.done(th)
	opts := &syntax.FileOptions{Set: true, While: true, TopLevelControl: true, GlobalReassign: false, Recursion: true}
	globals, err := starlark.ExecFileOptions(opts, th, m.name, src, l.predeclFor(m.name))
	if err == nil {
		for _, name := range stdExports[m.name] {
			globals[name] = l.predecl[name]
		}
	}
	return globals, kindCanceled(hintUndefined(err))
}

// stdExports are the builtins a standard-library module exports under
// their own names, which Starlark code cannot do (`assert = assert` reads
// the global before it is bound).
var stdExports = map[string][]string{
	stdPrefix + "testing.star": {"assert"},
}

// stdPrivate are builtins only a standard-library module sees, under
// names no script can reach: the library's Go hot paths (collfast.go).
var stdPrivate = map[string]starlark.StringDict{
	stdPrefix + "collectives.star": {"_direct_fast": builtin("_direct_fast", directFastBuiltin)},
}

// predeclFor is what module name sees predeclared: every script's
// globals, and a library module's private builtins.
func (l *loader) predeclFor(name string) starlark.StringDict {
	extra := stdPrivate[name]
	if extra == nil {
		return l.predecl
	}
	d := make(starlark.StringDict, len(l.predecl)+len(extra))
	for k, v := range l.predecl {
		d[k] = v
	}
	for k, v := range extra {
		d[k] = v
	}
	return d
}

// nameHints are what a name from another language is called here.
var nameHints = map[string]string{
	"np":    "the array module is `array`",
	"numpy": "the array module is `array`",
	"true":  "Starlark spells it True",
	"false": "Starlark spells it False",
	"null":  "Starlark spells it None",
	"nil":   "Starlark spells it None",
}

// hintUndefined adds to each "undefined: NAME" of a resolve error what
// NAME is called here, for the names users bring from Python and other
// languages.
func hintUndefined(err error) error {
	var list resolve.ErrorList
	if !errors.As(err, &list) {
		return err
	}
	for i, e := range list {
		if name, ok := strings.CutPrefix(e.Msg, "undefined: "); ok && nameHints[name] != "" {
			list[i].Msg += " (" + nameHints[name] + ")"
		}
	}
	return err
}

// boundLoad bounds a module's top level by MaxLoadSteps, or by
// --max-steps when that is lower.
func (l *loader) boundLoad(th *starlark.Thread, name string) {
	n, why := MaxLoadSteps, fmt.Sprintf("a module's top level may take at most %d steps", MaxLoadSteps)
	if l.maxSteps != 0 && (n == 0 || l.maxSteps < n) {
		n, why = l.maxSteps, fmt.Sprintf("--max-steps %d", l.maxSteps)
	}
	boundSteps(th, n, fmt.Sprintf("RuntimeError: too many steps loading %s (%s)", name, why))
}

// start records th as executing a module's top level, so that cancel
// reaches it; after cancel it refuses.
func (l *loader) start(th *starlark.Thread) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.canceled != "" {
		return errors.New(l.canceled)
	}
	l.running[th] = true
	return nil
}

func (l *loader) done(th *starlark.Thread) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.running, th)
}

// cancel stops every module top level executing now and makes every
// later load fail at once with reason (given a kind if it has none).
func (l *loader) cancel(reason string) {
	if _, _, kinded := engine.SplitKind(reason); !kinded {
		reason = "RuntimeError: " + reason
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.canceled == "" {
		l.canceled = reason
	}
	for th := range l.running {
		th.Cancel(l.canceled)
	}
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
