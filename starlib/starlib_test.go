package starlib

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.starlark.net/starlark"

	"simpler/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// runScript writes files into a temp dir and runs main.star there.
func runScript(t *testing.T, files map[string]string, argv ...string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	s := NewSession("a2a3sim", []int{0, 1}, "thread", argv, &out, &out)
	err := s.RunFile(filepath.Join(dir, "main.star"))
	if cerr := s.Close(); cerr != nil {
		t.Errorf("session close: %v", cerr)
	}
	return out.String(), err
}

const digestScript = `
load("lib.star", "helper")

def kernel(chip, args):
    helper()

def main(ctx):
    w = Worker(level = 3, device_ids = [0])
    print(w.register(kernel).hashid)
    w.close()
`

func TestDigestFollowsTheCode(t *testing.T) {
	lib := "def helper():\n    pass\n"
	a, err := runScript(t, map[string]string{"main.star": digestScript, "lib.star": lib})
	if err != nil {
		t.Fatal(err)
	}
	b, err := runScript(t, map[string]string{"main.star": digestScript, "lib.star": lib})
	if err != nil {
		t.Fatal(err)
	}
	if a != b || !strings.HasPrefix(a, "sha256:") || len(strings.TrimSpace(a)) != len("sha256:")+64 {
		t.Fatalf("same code gave digests %q and %q", a, b)
	}
	c, err := runScript(t, map[string]string{"main.star": digestScript, "lib.star": lib + "# changed\n"})
	if err != nil {
		t.Fatal(err)
	}
	if c == a {
		t.Fatalf("changing a loaded module kept the digest %q", a)
	}
}

func TestCloseReleasesWhatTheScriptLeftOpen(t *testing.T) {
	// The script never closes its worker and keeps host tensors; the
	// session must close both (leakcheck verifies goroutines and shm).
	out, err := runScript(t, map[string]string{"main.star": `
def k(chip, args):
    pass

def main(ctx):
    w = Worker(level = 3, device_ids = [0, 1], num_sub_workers = 2)
    w.register(k)
    w.init()
    for i in range(3):
        host_tensor(shape = [1024])
    w.submit(lambda o, a, c: o.submit_next_level(k, worker = 1))
    print("left open")
`})
	if err != nil || out != "left open\n" {
		t.Fatalf("out %q err %v", out, err)
	}
}

func TestBacktraceNamesEveryFrame(t *testing.T) {
	_, err := runScript(t, map[string]string{
		"main.star":  "load(\"lib/x.star\", \"f\")\n\ndef main(ctx):\n    f(0)\n",
		"lib/x.star": "def f(n):\n    g(n)\n\ndef g(n):\n    host_tensor(shape = [2], dtype = \"nope\")\n",
	})
	if err == nil {
		t.Fatal("want an error")
	}
	got := Backtrace(err)
	for _, want := range []string{"main.star:4:6: in main", "lib/x.star:2:6: in f", "lib/x.star:5:16: in g", "ValueError: host_tensor: unknown dtype \"nope\""} {
		if !strings.Contains(got, want) {
			t.Errorf("backtrace lacks %q:\n%s", want, got)
		}
	}
}

func TestModuleLoadHasNoSideEffects(t *testing.T) {
	for _, top := range []string{"W = Worker(level = 3)", "T = host_tensor(shape = [4])"} {
		_, err := runScript(t, map[string]string{"main.star": top + "\ndef main(ctx):\n    pass\n"})
		if err == nil || !strings.Contains(err.Error(), "may only be called at run time") {
			t.Errorf("%s at module level: err %v", top, err)
		}
	}
}

func TestCatchAndAssert(t *testing.T) {
	out, err := runScript(t, map[string]string{"main.star": `
def boom(x):
    fail("ValueError: bad " + x)

def main(ctx):
    print(catch(boom, "input"))
    print(catch(lambda: None))
    assert.fails(boom, "bad in", "input")
    print(catch(assert.eq, 1, 2))
    print(catch(assert.fails, lambda: None, "x"))
    print(catch(assert.allclose, [1.0, 2.0], [1.0, 2.5]) != None)
    assert.allclose(array.arange(4, FLOAT32) * 0.5, [0.0, 0.5, 1.0, 1.5])
    assert.true(True)
    assert.ne(1, 2)
`})
	if err != nil {
		t.Fatal(Backtrace(err))
	}
	want := "ValueError: bad input\nNone\nAssertionError: 1 != 2\nAssertionError: lambda succeeded; want an error matching \"x\"\nTrue\n"
	if out != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
}

func TestRegisterRefusesNonTopLevel(t *testing.T) {
	out, err := runScript(t, map[string]string{"main.star": `
def main(ctx):
    def inner(chip, args):
        pass
    w = Worker(level = 3, device_ids = [0])
    print(catch(w.register, inner))
    print(catch(w.register, print))
    w.close()
`})
	if err != nil {
		t.Fatal(Backtrace(err))
	}
	if !strings.Contains(out, "ValueError: register: inner (") || !strings.Contains(out, "main.star:3:5) is not a top-level function") || !strings.Contains(out, "TypeError: register: want a Starlark function, got builtin_function_or_method") {
		t.Fatalf("got %q", out)
	}
}

func TestErrorKindsSurviveKernels(t *testing.T) {
	err := kernelError(&starlark.EvalError{Msg: "fail: IndexError: at 3"})
	if got := err.Error(); got != "IndexError: at 3" {
		t.Fatalf("got %q", got)
	}
	if got := kernelError(&starlark.EvalError{Msg: "unknown binary op: int + string"}).Error(); got != "TypeError: unknown binary op: int + string" {
		t.Fatalf("got %q", got)
	}
	if got := kernelError(&starlark.EvalError{Msg: "something odd"}).Error(); got != "RuntimeError: something odd" {
		t.Fatalf("got %q", got)
	}
}
