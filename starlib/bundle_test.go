package starlib

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.starlark.net/starlark"
)

// A child loads the parent's modules from disk and refuses one whose
// source changed since the parent loaded it.
func TestChildRefusesAModuleChangedOnDisk(t *testing.T) {
	dir := t.TempDir()
	main := filepath.Join(dir, "main.star")
	lib := filepath.Join(dir, "lib.star")
	os.WriteFile(main, []byte("load(\"lib.star\", \"k\")\ndef main(ctx):\n    pass\n"), 0o644)
	os.WriteFile(lib, []byte("def k(chip, args):\n    pass\n"), 0o644)
	var out bytes.Buffer
	s := NewSession("a2a3sim", nil, "thread", nil, &out, &out)
	defer s.Close()
	if err := s.RunFile(main); err != nil {
		t.Fatal(err)
	}
	m, err := s.loader.load(displayName(lib))
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.callableFor("register", m.globals["k"].(*starlark.Function))
	if err != nil {
		t.Fatal(err)
	}
	bundle := s.bundle()

	// Unchanged: the child finds the callable under the same digest.
	r, err := NewResolver(bundle)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Resolve(c.Digest(), c.Module(), "k")
	if err != nil || got.Digest() != c.Digest() {
		t.Fatalf("resolve: %v", err)
	}

	os.WriteFile(lib, []byte("def k(chip, args):\n    fail(\"new code\")\n"), 0o644)
	r, err = NewResolver(bundle)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Resolve(c.Digest(), c.Module(), "k")
	if err == nil || !strings.Contains(err.Error(), "changed on disk since simpler started") {
		t.Fatalf("a changed module was accepted: %v", err)
	}
}
