// Package mpitest is how tests reach Open MPI's mpirun, the launcher of
// worker groups (add_worker_group), and the one rule they follow when it
// is missing.
//
// The rule: a test that needs mpirun finds it with Find. Under CI (the
// environment variable CI set to anything but "", "0" or "false", as
// CI services set it; .ci/run installs Open MPI and sets CI=1) a missing
// mpirun fails the test. On a developer's machine without it the test
// says so loudly on stderr, and runs what it can without a launcher: its
// ranks are started by the test itself (launcher="none"), which covers
// everything but mpirun.
//
// A test that runs every script of a directory (the golden scripts, the
// examples) asks Script about each one first: a script that starts a
// worker group with mpirun needs it, and Find decides as above; without
// mpirun outside CI the script is not run, loudly, and everything else
// still is.
//
// mpirun refuses to run as root unless told twice. Env is what a test
// adds to the environment of what it starts (a level-4 worker's process,
// so its launcher inherits it) to allow that: only in tests, only as
// root; the product never sets it.
package mpitest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.starlark.net/syntax"
)

// InCI reports whether the tests run under CI.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v != "" && v != "0" && v != "false"
}

// Env is the environment a test gives what it starts so that mpirun
// runs: Open MPI's two consents to running as root, when this process is
// root; nothing otherwise.
func Env() []string {
	if os.Geteuid() != 0 {
		return nil
	}
	return []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"}
}

// Find returns mpirun's path, or "" when it is not installed: then the
// test fails under CI, and otherwise it is told loudly that its launcher
// goes untested (it goes on without one).
func Find(t testing.TB) string {
	t.Helper()
	return find(t, `its ranks are started by the test (launcher="none"); the mpirun launcher itself is untested here`)
}

// Script reports whether a test that runs every script it finds may run
// the one at path. A script that starts a worker group with mpirun
// (NeedsMPI) needs it, and Find's rule decides: without mpirun the test
// fails under CI, and otherwise it is told loudly that this script is not
// run (false). Every other script, and one that cannot be read (running
// it reports why), may run.
func Script(t testing.TB, path string) bool {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil || !NeedsMPI(src) {
		return true
	}
	return find(t, fmt.Sprintf("%s starts a worker group with mpirun, and is NOT RUN; the mpirun launcher goes untested here", path)) != ""
}

// find is Find, with what goes untested when mpirun is missing.
func find(t testing.TB, untested string) string {
	t.Helper()
	path, err := exec.LookPath("mpirun")
	if err == nil {
		return path
	}
	if InCI() {
		t.Fatalf("mpirun (Open MPI) is not installed, and CI=%s requires it: .ci/run installs it (apt-get install -y openmpi-bin)", os.Getenv("CI"))
		return ""
	}
	msg := fmt.Sprintf("%s: mpirun (Open MPI) is NOT INSTALLED: %s. Install openmpi-bin to test it (CI fails without it).", t.Name(), untested)
	fmt.Fprintf(os.Stderr, "\n!!!!!!!!\n!!! %s\n!!!!!!!!\n\n", msg)
	t.Log(msg)
	return ""
}

// NeedsMPI reports whether a script's source starts a worker group with
// mpirun: it calls add_worker_group with launcher = "mpirun", or with no
// launcher (mpirun is the default), or with one that is not a string
// literal (it may be mpirun). A file that does not parse starts nothing.
func NeedsMPI(src []byte) bool {
	f, err := (&syntax.FileOptions{Set: true, While: true, TopLevelControl: true, GlobalReassign: true, Recursion: true}).Parse("script.star", src, 0)
	if err != nil {
		return false
	}
	needs := false
	syntax.Walk(f, func(n syntax.Node) bool {
		if call, ok := n.(*syntax.CallExpr); ok && calls(call, "add_worker_group") && launcher(call) == "mpirun" {
			needs = true
		}
		return !needs
	})
	return needs
}

// calls reports whether call calls a function or method named name.
func calls(call *syntax.CallExpr, name string) bool {
	switch fn := call.Fn.(type) {
	case *syntax.Ident:
		return fn.Name == name
	case *syntax.DotExpr:
		return fn.Name.Name == name
	}
	return false
}

// launcher is the launcher an add_worker_group call names: its
// launcher= string, "mpirun" when it gives none (the default) and when it
// is an expression or the arguments are spread (**kw) ("mpirun": it may
// be).
func launcher(call *syntax.CallExpr) string {
	for _, arg := range call.Args {
		if u, ok := arg.(*syntax.UnaryExpr); ok && u.Op == syntax.STARSTAR {
			return "mpirun"
		}
		b, ok := arg.(*syntax.BinaryExpr)
		if !ok || b.Op != syntax.EQ {
			continue
		}
		if k, ok := b.X.(*syntax.Ident); !ok || k.Name != "launcher" {
			continue
		}
		if lit, ok := b.Y.(*syntax.Literal); ok && lit.Token == syntax.STRING {
			return lit.Value.(string)
		}
		return "mpirun"
	}
	return "mpirun"
}
