package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"simpler/internal/token"
)

// shippedScript is a parent whose code, shipped to a remote node, tries
// from inside its tasks (a node orchestration and a chip kernel) every
// builtin that reaches the host: each attempt's error is printed, then a
// legitimate task runs on the same node. %q are the address of a
// listener of the test's, a file a launcher would create, and a token
// file the node would read.
const shippedScript = `LISTENER = %q
MARKER = %q
SECRET = %q

def try_worker(o, args, cfg):
    Worker(level = 3, platform = "a2a3sim").init()

def try_remote(o, args, cfg):
    w = Worker(level = 4, platform = "a2a3sim", startup_timeout_s = 2)
    w.add_remote_worker(endpoint = LISTENER, platform = "a2a3sim", token = "0123456789abcdef0123")
    w.init()

def try_default_token(o, args, cfg):
    w = Worker(level = 4, platform = "a2a3sim", startup_timeout_s = 2)
    w.add_remote_worker(endpoint = LISTENER, platform = "a2a3sim")
    w.init()

def try_group(o, args, cfg):
    w = Worker(level = 4, platform = "a2a3sim", startup_timeout_s = 2)
    w.add_worker_group(ranks = 1, platform = "a2a3sim", launcher_args = [":", "touch", MARKER], token_file = SECRET)
    w.init()

def kernel_tries(chip, args):
    Worker(level = 2, platform = "a2a3sim", device_id = 0).init()

def try_in_kernel(o, args, cfg):
    o.submit_next_level(kernel_tries, TaskArgs(), worker = 0)

def add_one(chip, args):
    args.tensor(1).write(args.tensor(0).read() + 1.0)

def legit(o, args, cfg):
    o.submit_next_level(add_one, TaskArgs(tensors = [(args.tensor(0), INPUT), (args.tensor(1), OUTPUT)]), worker = 0)

def on_node(o, args, cfg):
    fn, tensors = cfg
    o.submit_next_level(fn, TaskArgs(tensors = tensors), worker = 0)

def main(ctx):
    w = Worker(level = 4, platform = ctx.platform)
    w.add_remote_worker(endpoint = ctx.argv[0], platform = ctx.platform, device_ids = [0])
    for fn in [try_worker, try_remote, try_default_token, try_group, kernel_tries, try_in_kernel, add_one, legit]:
        w.register(fn)
    w.init()
    tries = [("try_worker", try_worker), ("try_remote", try_remote), ("try_default_token", try_default_token),
             ("try_group", try_group), ("try_in_kernel", try_in_kernel)]
    for name, fn in tries:
        print(name, "->", catch(w.run, on_node, None, (fn, [])))
    n = 4
    out = w.remote_malloc(worker = 0, nbytes = 4 * n)
    x = RemoteTensorRef.host_inline(array.arange(n, FLOAT32).tobytes(), shape = [n])
    w.run(on_node, None, (legit, [(x, INPUT), (RemoteTensorRef(out, shape = [n]), OUTPUT)]))
    back = host_tensor(shape = [n])
    w.remote_copy_from(out, back, back.nbytes)
    print("legit ->", back.read().tolist())
    w.remote_free(out)
    w.close()
`

// Code a parent ships runs on the daemon's host as a task, not as a host
// program: from inside a node orchestration and a chip kernel, Worker()
// (and so add_remote_worker, to a port the test listens on, with a token
// or with none, the listener's default token being where a daemon's
// would be, and add_worker_group, with launcher_args
// and token_file=) is refused with a RuntimeError naming the builtin and
// why. The listener gets no connection, the launcher's file is not made,
// and a legitimate task runs on the same node right after.
func TestShippedCodeCannotReachTheHost(t *testing.T) {
	_, addr := startRemoteDaemon(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The listener's default token, where a client on this host looks
	// for a daemon's: what add_remote_worker with no token would read.
	tokenPath, _, err := token.Generate(ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	defer token.Remove(tokenPath)
	dir := t.TempDir()
	marker := filepath.Join(dir, "launched")
	secret := filepath.Join(dir, "secret.token")
	writeFiles(t, dir, map[string]string{"secret.token": "0123456789abcdef0123\n"})
	if err := os.Chmod(secret, 0o600); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "ship.star")
	writeFiles(t, dir, map[string]string{"ship.star": fmt.Sprintf(shippedScript, ln.Addr().String(), marker, secret)})

	code, out, errs := runCLI(t, "run", "--devices", "0", script, addr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	tries := map[string][]string{ // each attempt's line names the builtin it reached for
		"try_worker":        {"Worker()"},
		"try_remote":        {"Worker()", "add_remote_worker"},
		"try_default_token": {"Worker()", "add_remote_worker"},
		"try_group":         {"Worker()", "add_worker_group", "launcher_args", "token_file="},
		"try_in_kernel":     {"Worker()"},
	}
	if len(lines) != len(tries)+1 {
		t.Fatalf("stdout:\n%s", out)
	}
	for _, line := range lines[:len(tries)] {
		name, msg, _ := strings.Cut(line, " -> ")
		want, ok := tries[name]
		if !ok || !strings.HasPrefix(msg, "RuntimeError: ") || !strings.Contains(msg, "Worker(): code shipped to a remote node runs as a task there, not as a host program") {
			t.Errorf("%s: %s; want a RuntimeError refusing Worker() in shipped code", name, msg)
			continue
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %s; want it to name %s", name, msg, w)
			}
		}
		if strings.Contains(msg, "0123456789abcdef") {
			t.Errorf("%s: the refusal carries the token file's content: %s", name, msg)
		}
	}
	if got := lines[len(lines)-1]; got != "legit -> [1.0, 2.0, 3.0, 4.0]" {
		t.Errorf("the legitimate task after the refusals: %q", got)
	}
	// Every attempt has returned, so a dial would be queued by now.
	ln.(*net.TCPListener).SetDeadline(time.Now())
	if c, err := ln.Accept(); err == nil {
		c.Close()
		t.Error("shipped code connected to the test's listener")
	} else if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("accept: %v", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a launcher ran for shipped code: %s: %v", marker, err)
	}
}
