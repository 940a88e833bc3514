package main

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// freshCloneDocs are pasted, in this order, into one fresh copy of the
// repository: the README first, then the guide.
var freshCloneDocs = []string{"README.md", "docs/guide.md"}

// freshCommandTimeout bounds each command pasted from the docs; the first
// builds the binary.
const freshCommandTimeout = 2 * time.Minute

// TestDocsFreshClone pastes every command of README.md and then
// docs/guide.md, in order, into a shell in a fresh copy of the repository
// whose PATH has no simpler on it: what the docs say to build is built
// (once, by their own `go build` line) and what they say to export is
// exported, so a doc that runs simpler before putting it on PATH, or
// names a file the repository does not ship, fails here.
func TestDocsFreshClone(t *testing.T) {
	root := filepath.Join("..", "..")
	clone := t.TempDir()
	shipped := copyTree(t, root, clone)
	sh := newDocShell(t, clone)
	for _, name := range freshCloneDocs {
		src, err := os.ReadFile(filepath.Join(clone, name))
		if err != nil {
			t.Fatal(err)
		}
		ran := 0
		for _, b := range parseDoc(string(src)) {
			ran += sh.block(name, b, shipped)
			if t.Failed() {
				t.FailNow() // later commands build on earlier ones
			}
		}
		if ran == 0 {
			t.Errorf("%s: no commands ran", name)
		}
		t.Logf("%s: %d commands and sessions run", name, ran)
	}
	if _, err := os.Stat(filepath.Join(clone, "bin", "simpler")); err != nil {
		t.Errorf("the docs never built bin/simpler: %v", err)
	}
}

// copyTree copies the regular files under root into dst, leaving out
// version-control data and the built binaries (bin/ at the top), as a
// fresh clone has them. It returns the copied paths, slash-separated.
func copyTree(t *testing.T, root, dst string) map[string]bool {
	t.Helper()
	copied := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.Name() == ".git" || rel == "bin" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		target := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := copyFile(path, target); err != nil {
			return err
		}
		copied[filepath.ToSlash(rel)] = true
		return nil
	})
	if err != nil {
		t.Fatalf("copying the repository: %v", err)
	}
	return copied
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// docShell runs pasted commands with sh in the fresh copy. Each runs in a
// new sh, after the export lines pasted before it (what a terminal would
// remember between them).
type docShell struct {
	t       *testing.T
	dir     string
	env     []string
	exports string
}

func newDocShell(t *testing.T, dir string) *docShell {
	env := cliEnv("NO_COLOR=1", "XDG_STATE_HOME="+t.TempDir(),
		"PATH="+pathWithoutSimpler(),
		// The copy's packages live in a new directory each run: without
		// -trimpath the build cache would miss them all.
		"GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -trimpath"),
		// A fresh terminal, not the make that may run this test.
		"MAKEFLAGS=", "MFLAGS=", "MAKELEVEL=")
	return &docShell{t: t, dir: dir, env: env}
}

// pathWithoutSimpler is $PATH without the directories that hold a
// simpler binary, so only the one the docs build can run.
func pathWithoutSimpler() string {
	var keep []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(dir, "simpler")); err == nil {
			continue
		}
		keep = append(keep, dir)
	}
	return strings.Join(keep, string(filepath.ListSeparator))
}

// run runs one pasted line, with stdin, and returns its stdout and stderr
// interleaved and whether it exited 0.
func (s *docShell) run(line, stdin string) (string, bool) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), freshCommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", s.exports+line)
	cmd.Dir = s.dir
	cmd.Env = s.env
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		s.t.Fatalf("%q ran longer than %v", line, freshCommandTimeout)
	}
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		s.t.Fatalf("running %q: %v", line, err)
	}
	checkNoShm(s.t, s.env)
	if strings.HasPrefix(line, "export ") && err == nil {
		s.exports += line + "\n"
	}
	return out.String(), err == nil
}

// block does what one block of a document asks, and returns how many
// commands or sessions it ran.
func (s *docShell) block(doc string, b docBlock, shipped map[string]bool) int {
	s.t.Helper()
	k, arg := b.kind()
	switch {
	case k == "file":
		s.file(doc, b, arg, shipped[arg])
		return 0
	case k == "repl":
		s.repl(doc, b, arg)
		return 1
	case b.info != "console" || k == "by-hand":
		return 0
	}
	n := 0
	for i := 0; i < len(b.body); {
		at := b.line + 1 + i
		line := b.body[i]
		if !strings.HasPrefix(line, "$ ") {
			s.t.Errorf("%s:%d: console block line %q is not a command", doc, at, line)
			i++
			continue
		}
		var want []string
		j := i + 1
		for ; j < len(b.body) && !strings.HasPrefix(b.body[j], "$ "); j++ {
			want = append(want, b.body[j])
		}
		start := time.Now()
		got, ok := s.run(strings.TrimPrefix(line, "$ "), "")
		s.t.Logf("%s:%d: %s (%.1fs)", doc, at, line, time.Since(start).Seconds())
		switch {
		case k == "no-check" && !ok:
			s.t.Errorf("%s:%d: %s failed:\n%s", doc, at, line, got)
		case k != "no-check" && !matchLines(splitOutput(normalizeDoc(strings.Join(want, "\n"))), splitOutput(normalizeDoc(got))):
			s.t.Errorf("%s:%d: %s\nwant:\n%s\ngot:\n%s", doc, at, line, strings.Join(want, "\n"), got)
		}
		n++
		i = j
	}
	return n
}

// file writes a block the reader is asked to save, or checks that a file
// the repository ships is the one the document shows.
func (s *docShell) file(doc string, b docBlock, path string, isShipped bool) {
	s.t.Helper()
	body := strings.Join(b.body, "\n") + "\n"
	target := filepath.Join(s.dir, filepath.FromSlash(path))
	if !isShipped {
		writeFiles(s.t, s.dir, map[string]string{path: body})
		return
	}
	have, err := os.ReadFile(target)
	if err != nil || string(have) != body {
		s.t.Errorf("%s:%d: the block differs from the shipped %s (%v)", doc, b.line, path, err)
	}
}

// repl feeds a REPL transcript's input lines to `simpler repl FLAGS`.
func (s *docShell) repl(doc string, b docBlock, flags string) {
	s.t.Helper()
	input, want := replTranscript(b)
	got, _ := s.run("simpler repl "+flags, strings.Join(input, "\n")+"\n")
	if !matchLines(splitOutput(normalizeDoc(strings.Join(want, "\n"))), splitOutput(normalizeDoc(got))) {
		s.t.Errorf("%s:%d: REPL session\nwant:\n%s\ngot:\n%s", doc, b.line, strings.Join(want, "\n"), got)
	}
}
