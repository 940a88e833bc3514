package starlib

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.starlark.net/starlark"

	"simpler/wire"
)

// setMaxLoadSteps sets MaxLoadSteps for one test.
func setMaxLoadSteps(t *testing.T, n uint64) {
	old := MaxLoadSteps
	MaxLoadSteps = n
	t.Cleanup(func() { MaxLoadSteps = old })
}

const spinMain = `
def spin():
    n = 0
    while True:
        n += 1

def main(ctx):
    print("before")
    spin()
`

func TestMaxStepsBoundsMain(t *testing.T) {
	root := tree(t, t.TempDir(), map[string]string{"main.star": spinMain})
	out, err := runIn(t, root, func(s *Session) { s.SetMaxSteps(10_000) })
	if out != "before\n" {
		t.Errorf("out %q", out)
	}
	wantRefusal(t, err, "\nRuntimeError: too many steps (--max-steps 10000)", "in spin")

	// A bound the script stays under changes nothing.
	tree(t, root, map[string]string{"main.star": "def main(ctx):\n    n = 0\n    for i in range(1000):\n        n += i\n    print(n)\n"})
	out, err = runIn(t, root, func(s *Session) { s.SetMaxSteps(100_000) })
	if err != nil || out != "499500\n" {
		t.Fatalf("out %q, err %v", out, err)
	}
}

const spinKernel = `
def spin(chip, args):
    n = 0
    while True:
        n += 1

def spin_sub(args):
    spin(None, args)

def quick(chip, args):
    n = 0
    for i in range(200):
        n += i

def node_spin(o, args, cfg):
    spin(None, args)

def orch_spin(o, args, cfg):
    o.submit_next_level(spin, TaskArgs(), worker = 0)

def orch_sub(o, args, cfg):
    o.submit_sub(spin_sub, TaskArgs())

def orch_quick(o, args, cfg):
    for i in range(20):
        o.submit_next_level(quick, TaskArgs(), worker = 0)

def orch_node(o, args, cfg):
    o.submit_next_level(node_spin, TaskArgs(), worker = 0)

def main(ctx):
    w = Worker(level = 3, device_ids = [0], num_sub_workers = 1)
    for f in [spin, spin_sub, quick]:
        w.register(f)
    w.init()
    print(catch(lambda: w.run(orch_spin)))
    print(catch(lambda: w.run(orch_sub)))
    w.run(orch_quick)  # 20 tasks of ~1000 steps on one endpoint: the bound is per task
    print("quick ran")
    w.close()

    l4 = Worker(level = 4)
    l4.add_worker(Worker(level = 3, device_ids = [1]))
    l4.register(node_spin)
    l4.init()
    print(catch(lambda: l4.run(orch_node)))
    l4.close()
`

// Thread-mode kernels, SUB callables and a child's orchestration
// functions run on threads of their own, each bounded.
func TestMaxStepsBoundsKernelsAndOrchestration(t *testing.T) {
	root := tree(t, t.TempDir(), map[string]string{"main.star": spinKernel})
	out, err := runIn(t, root, func(s *Session) { s.SetMaxSteps(5_000) })
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("output:\n%s", out)
	}
	for i, what := range []string{`"spin" failed`, `"spin_sub" failed`, "", `"node_spin" failed`} {
		if i == 2 {
			if lines[i] != "quick ran" {
				t.Errorf("short kernels after one past the bound: %q", lines[i])
			}
			continue
		}
		if !strings.HasPrefix(lines[i], "RuntimeError: ") || !strings.Contains(lines[i], what) || !strings.Contains(lines[i], "too many steps (--max-steps 5000)") {
			t.Errorf("want a RuntimeError: %s: too many steps; got %q", what, lines[i])
		}
	}
}

const loopModule = "n = [0]\nwhile True:\n    n[0] += 1\n\ndef k(chip, args):\n    pass\n"

func TestModuleTopLevelLoopFailsUnderMaxLoadSteps(t *testing.T) {
	setMaxLoadSteps(t, 50_000)
	root := tree(t, t.TempDir(), map[string]string{"main.star": loadMain("lib/loop.star"), "lib/loop.star": loopModule})
	_, err := runIn(t, root, nil)
	wantRefusal(t, err, "RuntimeError: cannot load lib/loop.star: too many steps loading "+filepath.Join(root, "lib", "loop.star")+" (a module's top level may take at most 50000 steps)")

	// A lower --max-steps bounds a top level too, and says so.
	_, err = runIn(t, root, func(s *Session) { s.SetMaxSteps(1000) })
	wantRefusal(t, err, "RuntimeError: cannot load lib/loop.star: too many steps loading", "(--max-steps 1000)")

	// The main script's own top level is a module like any other.
	tree(t, root, map[string]string{"main.star": loopModule})
	_, err = runIn(t, root, nil)
	wantRefusal(t, err, "RuntimeError: too many steps loading "+filepath.Join(root, "main.star"))
}

// A remote node's resolver loads shipped modules and nothing from disk;
// Cancel stops a module load in progress at once and refuses later ones.
func TestSourceResolverCancel(t *testing.T) {
	setMaxLoadSteps(t, 0) // only Cancel can stop the loop
	r, err := NewSourceResolver("main.star", []wire.Module{{Name: "main.star", Source: []byte(loopModule)}})
	if err != nil {
		t.Fatal(err)
	}
	c, ok := r.(interface{ Cancel(reason string) })
	if !ok {
		t.Fatal("the resolver has no Cancel method")
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Resolve("sha256:x", "main.star", "k")
		done <- err
	}()
	l := r.(*resolver).s.loader
	waitFor(t, "the module load to start", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.running) == 1
	})
	start := time.Now()
	c.Cancel("client went away")
	select {
	case err := <-done:
		if took := time.Since(start); took > 100*time.Millisecond {
			t.Errorf("the load stopped %v after Cancel", took)
		}
		wantRefusal(t, err, "RuntimeError: client went away")
		if strings.Contains(err.Error(), canceledPrefix) {
			t.Errorf("the message keeps Starlark's prefix: %v", err)
		}
	case <-time.After(deadline):
		t.Fatal("Cancel did not stop the module load")
	}
	start = time.Now()
	_, err = r.Resolve("sha256:x", "other.star", "k")
	wantRefusal(t, err, "RuntimeError: client went away")
	if time.Since(start) > 100*time.Millisecond {
		t.Errorf("a load after Cancel took %v", time.Since(start))
	}
}

// A shipped module that is not there, or a load of a module the client
// did not ship, never falls back to this node's disk.
func TestSourceResolverNeverReadsDisk(t *testing.T) {
	dir := tree(t, t.TempDir(), map[string]string{"lib.star": "def k(chip, args):\n    pass\n"})
	mainName := filepath.Join(dir, "main.star")
	src := "load(\"lib.star\", \"k\")\n"
	r, err := NewSourceResolver(mainName, []wire.Module{{Name: mainName, Source: []byte(src)}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Resolve("sha256:x", mainName, "k")
	wantRefusal(t, err, "ValueError: cannot load lib.star: module "+filepath.Join(dir, "lib.star")+" was not shipped with the session")

	// A shipped module is held to the size bound like a file.
	big := make([]byte, MaxModuleSize+1)
	r, err = NewSourceResolver("main.star", []wire.Module{{Name: "main.star", Source: big}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Resolve("sha256:x", "main.star", "k")
	wantRefusal(t, err, "ValueError: shipped module main.star is 4194305 bytes, above the bound of 4194304")
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A child reads only the files its parent loaded, with the same checks;
// a module of a --load-path root is found there too.
func TestChildResolverConfinement(t *testing.T) {
	top := tree(t, t.TempDir(), map[string]string{
		"shared/kern.star": "def k(chip, args):\n    pass\n",
		"root/main.star":   "load(\"../shared/kern.star\", \"k\")\ndef main(ctx):\n    pass\n",
		"root/other.star":  "def k(chip, args):\n    pass\n",
	})
	var out bytes.Buffer
	s := NewSession("a2a3sim", nil, "thread", nil, &out, &out)
	defer s.Close()
	if err := s.AddLoadPath(filepath.Join(top, "shared")); err != nil {
		t.Fatal(err)
	}
	if err := s.RunFile(filepath.Join(top, "root", "main.star")); err != nil {
		t.Fatal(err)
	}
	kern := filepath.Join(top, "shared", "kern.star")
	m, err := s.loader.load(kern)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.callableFor("register", m.globals["k"].(*starlark.Function))
	if err != nil {
		t.Fatal(err)
	}
	bundle := s.bundle()
	r, err := NewResolver(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.Resolve(c.Digest(), c.Module(), "k"); err != nil || got.Digest() != c.Digest() {
		t.Fatalf("resolving a kernel of a --load-path root: %v", err)
	}

	// A module the parent never loaded is not read, even below the root.
	r, _ = NewResolver(bundle)
	_, err = r.Resolve(c.Digest(), filepath.Join(top, "root", "other.star"), "k")
	wantRefusal(t, err, "RuntimeError: module "+filepath.Join(top, "root", "other.star")+" was not loaded by the parent process")

	// One the parent loaded that has become a fifo is refused, unread.
	os.Remove(kern)
	if err := syscall.Mkfifo(kern, 0o644); err != nil {
		t.Fatal(err)
	}
	r, _ = NewResolver(bundle)
	err = withDeadline(t, "resolving from a fifo", func() error {
		_, err := r.Resolve(c.Digest(), c.Module(), "k")
		return err
	})
	wantRefusal(t, err, "not a regular file (a fifo)")
}
