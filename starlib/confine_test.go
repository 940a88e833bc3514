package starlib

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// deadline is how long a refusal may take: every check is a few system
// calls, and a load that blocks (on a fifo, a device) must fail instead.
const deadline = 20 * time.Second

// withDeadline runs fn and fails the test if it has not returned in time.
func withDeadline(t *testing.T, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(deadline):
		t.Fatalf("%s still running after %v: it blocks", what, deadline)
		return nil
	}
}

// tree writes name → contents below dir and returns dir.
func tree(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	for name, src := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runIn runs main.star of dir in a fresh session; setup, if set, prepares
// the session first. It returns what the script printed and its error
// as simpler run prints it.
func runIn(t *testing.T, dir string, setup func(*Session)) (string, error) {
	t.Helper()
	var out bytes.Buffer
	s := NewSession("a2a3sim", []int{0, 1}, "thread", nil, &out, &out)
	if setup != nil {
		setup(s)
	}
	err := withDeadline(t, "the script", func() error { return s.RunFile(filepath.Join(dir, "main.star")) })
	if cerr := s.Close(); cerr != nil {
		t.Errorf("session close: %v", cerr)
	}
	if err != nil {
		err = errors.New(Backtrace(err))
	}
	return out.String(), err
}

// wantRefusal fails unless err carries every part of want.
func wantRefusal(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one with %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
}

// secret is a module outside the root: loading it would print.
const secret = "print(\"SECRET LOADED\")\nX = 1\n"

func loadMain(path string) string {
	return "load(\"" + path + "\", \"X\")\n\ndef main(ctx):\n    print(X)\n"
}

func TestLoadRefusesDotDot(t *testing.T) {
	top := tree(t, t.TempDir(), map[string]string{"secret.star": secret, "a/secret.star": secret})
	for _, path := range []string{"../secret.star", "../../secret.star", "lib/../../secret.star"} {
		root := tree(t, filepath.Join(top, "a", "root"), map[string]string{"main.star": loadMain(path)})
		out, err := runIn(t, root, nil)
		wantRefusal(t, err, `ValueError: cannot load "`+path+`"`, "outside the load roots")
		if strings.Contains(out, "SECRET") {
			t.Errorf("%s: the module outside the root ran", path)
		}
	}
}

func TestLoadRefusesAbsolutePathsOutside(t *testing.T) {
	top := tree(t, t.TempDir(), map[string]string{"secret.star": secret})
	for _, path := range []string{"/etc/passwd", filepath.Join(top, "secret.star")} {
		root := tree(t, filepath.Join(top, "root"), map[string]string{"main.star": loadMain(path)})
		out, err := runIn(t, root, nil)
		wantRefusal(t, err, `ValueError: cannot load "`+path+`": outside the load roots`)
		if strings.Contains(out, "SECRET") {
			t.Errorf("%s was loaded", path)
		}
	}
}

func TestLoadAcceptsAbsolutePathsInside(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"lib/x.star": "X = 42\n", "main.star": loadMain(filepath.Join(root, "lib", "x.star"))})
	out, err := runIn(t, root, nil)
	if err != nil || out != "42\n" {
		t.Fatalf("out %q, err %v", out, err)
	}
}

func TestLoadRefusesSymlinksLeavingTheRoot(t *testing.T) {
	top := tree(t, t.TempDir(), map[string]string{"secret.star": secret, "outside/x.star": secret})
	root := filepath.Join(top, "root")
	for _, c := range []struct{ link, target, load string }{
		{"lib/file.star", filepath.Join(top, "secret.star"), "lib/file.star"}, // the file itself
		{"dir", filepath.Join(top, "outside"), "dir/x.star"},                  // a directory on the way
		{"rel.star", "../secret.star", "rel.star"},                            // a relative target
	} {
		tree(t, root, map[string]string{"main.star": loadMain(c.load)})
		os.MkdirAll(filepath.Dir(filepath.Join(root, c.link)), 0o755)
		if err := os.Symlink(c.target, filepath.Join(root, c.link)); err != nil {
			t.Fatal(err)
		}
		out, err := runIn(t, root, nil)
		wantRefusal(t, err, `ValueError: cannot load "`+c.load+`"`, "a symlink leads to", "outside the load roots")
		if strings.Contains(out, "SECRET") {
			t.Errorf("%s: loaded through a symlink out of the root", c.load)
		}
	}
}

func TestLoadFollowsSymlinksInsideTheRoot(t *testing.T) {
	root := tree(t, t.TempDir(), map[string]string{"lib/real.star": "X = 7\n"})
	if err := os.Symlink("lib/real.star", filepath.Join(root, "alias.star")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("lib", filepath.Join(root, "libs")); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"alias.star", "libs/real.star"} {
		tree(t, root, map[string]string{"main.star": loadMain(path)})
		out, err := runIn(t, root, nil)
		if err != nil || out != "7\n" {
			t.Errorf("%s: out %q, err %v", path, out, err)
		}
	}
}

func TestLoadRefusesDevices(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"main.star": loadMain("/dev/zero")})
	_, err := runIn(t, root, nil)
	wantRefusal(t, err, `ValueError: cannot load "/dev/zero": outside the load roots`)

	// Below a load root, a device is refused for what it is, unread.
	_, err = runIn(t, root, func(s *Session) { s.AddLoadPath("/dev") })
	wantRefusal(t, err, `ValueError: cannot load "/dev/zero": not a regular file (a character device)`)
}

func TestLoadRefusesStdin(t *testing.T) {
	root := tree(t, t.TempDir(), map[string]string{"main.star": loadMain("/dev/stdin")})
	_, err := runIn(t, root, nil)
	wantRefusal(t, err, `ValueError: cannot load "/dev/stdin": outside the load roots`)

	// With /dev a root, /dev/stdin is a symlink to whatever stdin is: a
	// device, a pipe or a file elsewhere; every one is refused.
	_, err = runIn(t, root, func(s *Session) { s.AddLoadPath("/dev") })
	wantRefusal(t, err, `ValueError: cannot load "/dev/stdin": `)
}

func TestLoadRefusesAFifo(t *testing.T) {
	root := tree(t, t.TempDir(), map[string]string{"main.star": loadMain("lib/pipe.star")})
	os.Mkdir(filepath.Join(root, "lib"), 0o755)
	if err := syscall.Mkfifo(filepath.Join(root, "lib", "pipe.star"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Nobody writes to the fifo: opening it to read would wait for ever.
	_, err := runIn(t, root, nil)
	wantRefusal(t, err, `ValueError: cannot load "lib/pipe.star"`, "not a regular file (a fifo)")
}

func TestLoadRefusesADirectory(t *testing.T) {
	root := tree(t, t.TempDir(), map[string]string{"main.star": loadMain("lib"), "lib/x.star": "X = 1\n"})
	_, err := runIn(t, root, nil)
	wantRefusal(t, err, `ValueError: cannot load "lib"`, "not a regular file (a directory)")
}

func TestLoadRefusesAModuleAboveTheSizeBound(t *testing.T) {
	root := t.TempDir()
	at := "X = 1\n#" + strings.Repeat(" ", MaxModuleSize-len("X = 1\n#"))
	tree(t, root, map[string]string{"main.star": loadMain("at.star"), "at.star": at, "big.star": at + " "})
	out, err := runIn(t, root, nil)
	if err != nil || out != "1\n" {
		t.Fatalf("a module of exactly MaxModuleSize bytes: out %q, err %v", out, err)
	}
	tree(t, root, map[string]string{"main.star": loadMain("big.star")})
	_, err = runIn(t, root, nil)
	wantRefusal(t, err, `ValueError: cannot load "big.star" (`, "big.star): it is 4194305 bytes, above the bound of 4194304")
}

func TestLoadOfAMissingFileNamesIt(t *testing.T) {
	root := tree(t, t.TempDir(), map[string]string{"main.star": loadMain("lib/nowhere.star")})
	_, err := runIn(t, root, nil)
	wantRefusal(t, err, `ValueError: cannot load "lib/nowhere.star"`, "no such file or directory")

	// From a module in lib/, the message also says where the path led.
	tree(t, root, map[string]string{"main.star": loadMain("lib/a.star"), "lib/a.star": "load(\"b.star\", \"X\")\n"})
	_, err = runIn(t, root, nil)
	wantRefusal(t, err, `ValueError: cannot load lib/a.star: cannot load "b.star" (`+filepath.Join(root, "lib", "b.star")+`): no such file or directory`)
}

func TestLoadPathRoots(t *testing.T) {
	top := tree(t, t.TempDir(), map[string]string{
		"shared/util.star":  "X = \"shared\"\n",
		"vendor/more.star":  "Y = \"vendor\"\n",
		"other/secret.star": secret,
	})
	shared, vendor := filepath.Join(top, "shared"), filepath.Join(top, "vendor")
	root := tree(t, filepath.Join(top, "root"), map[string]string{"main.star": `
load("../shared/util.star", "X")
load("` + filepath.Join(vendor, "more.star") + `", "Y")

def main(ctx):
    print(X, Y)
`})
	_, err := runIn(t, root, nil)
	wantRefusal(t, err, `ValueError: cannot load "../shared/util.star"`, "outside the load roots")
	_, err = runIn(t, root, func(s *Session) { s.AddLoadPath(shared) })
	wantRefusal(t, err, `ValueError: cannot load "`+filepath.Join(vendor, "more.star")+`": outside the load roots`)
	out, err := runIn(t, root, func(s *Session) { s.AddLoadPath(shared); s.AddLoadPath(vendor) })
	if err != nil || out != "shared vendor\n" {
		t.Fatalf("with both roots: out %q, err %v", out, err)
	}

	// A load path widens nothing else.
	tree(t, root, map[string]string{"main.star": loadMain("../other/secret.star")})
	_, err = runIn(t, root, func(s *Session) { s.AddLoadPath(shared) })
	wantRefusal(t, err, `ValueError: cannot load "../other/secret.star"`, "outside the load roots")

	s := NewSession("a2a3sim", nil, "thread", nil, &bytes.Buffer{}, &bytes.Buffer{})
	defer s.Close()
	wantRefusal(t, s.AddLoadPath(filepath.Join(top, "none")), `ValueError: load path "`, "no such file or directory")
	wantRefusal(t, s.AddLoadPath(filepath.Join(shared, "util.star")), "not a directory")
}

// The main script defines the root, and must itself be a regular file
// within the size bound.
func TestMainScriptChecks(t *testing.T) {
	dir := tree(t, t.TempDir(), map[string]string{"big.star": strings.Repeat("#", MaxModuleSize+1)})
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.star"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{dir, "not a regular file (a directory)"},
		{"/dev/zero", "not a regular file (a character device)"},
		{filepath.Join(dir, "pipe.star"), "not a regular file (a fifo)"},
		{filepath.Join(dir, "big.star"), "it is 4194305 bytes, above the bound of 4194304"},
		{filepath.Join(dir, "none.star"), "no such file or directory"},
	} {
		s := NewSession("a2a3sim", nil, "thread", nil, &bytes.Buffer{}, &bytes.Buffer{})
		err := withDeadline(t, c.path, func() error { return s.RunFile(c.path) })
		s.Close()
		wantRefusal(t, err, `ValueError: cannot load "`+c.path+`": `+c.want)
	}

	// A main script that is a symlink is run (the user named it), and
	// its directory, not its target's, is the root.
	tree(t, dir, map[string]string{"real/main.star": loadMain("lib.star"), "real/lib.star": "X = 1\n", "link/lib.star": "X = 2\n"})
	if err := os.Symlink("../real/main.star", filepath.Join(dir, "link", "main.star")); err != nil {
		t.Fatal(err)
	}
	out, err := runIn(t, filepath.Join(dir, "link"), nil)
	if err != nil || out != "2\n" {
		t.Fatalf("a symlinked main script: out %q, err %v", out, err)
	}
}
