package starlib

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.starlark.net/starlark"

	"simpler/wire"
)

// Every host-reaching builtin refuses in a shipped session, even on a
// Worker value that reached its code (which shipped code cannot make):
// add_remote_worker and add_worker_group check the session too, before
// reading an argument. Worker() at a shipped module's top level gets the
// shipped refusal, not only the load-time one. A session of a script
// (not shipped) makes the same Worker.
func TestShippedSessionRefusesHostReach(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // an endpoint that exists
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := `def try_remote():
    w.add_remote_worker(endpoint = "` + ln.Addr().String() + `", token = "0123456789abcdef0123")

def try_group():
    w.add_worker_group(ranks = 1, launcher_args = [":", "sh"], token_file = "` + secret + `")

def try_worker():
    Worker(level = 3, platform = "a2a3sim")
`
	r, err := NewSourceResolver("main.star", []wire.Module{{Name: "main.star", Source: []byte(src)}, {Name: "top.star", Source: []byte("w2 = Worker(level = 3)\n")}})
	if err != nil {
		t.Fatal(err)
	}
	s := r.(*resolver).s
	th := &starlark.Thread{Name: "test"}
	kw := []starlark.Tuple{{starlark.String("level"), starlark.MakeInt(4)}, {starlark.String("platform"), starlark.String("a2a3sim")}}
	s.shipped = false // a Worker made as a script would: what shipped code must not be able to use
	wv, err := s.newWorker(th, nil, nil, kw)
	s.shipped = true
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Predeclare("w", wv)
	m, err := s.loader.load("main.star")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"try_remote": "RuntimeError: add_remote_worker: code shipped to a remote node runs as a task there, not as a host program",
		"try_group":  "RuntimeError: add_worker_group: code shipped to a remote node runs as a task there, not as a host program",
		"try_worker": "RuntimeError: Worker(): code shipped to a remote node runs as a task there, not as a host program",
	} {
		_, err := starlark.Call(s.newThread(name), m.globals[name], nil, nil)
		if err == nil || !strings.Contains(Message(err), want) {
			t.Errorf("%s: %v; want %q", name, err, want)
		}
		if err != nil && strings.Contains(Message(err), "0123456789abcdef") {
			t.Errorf("%s: the refusal carries the token file's content: %v", name, err)
		}
	}
	_, err = s.loader.load("top.star")
	if err == nil || !strings.Contains(err.Error(), "Worker(): code shipped to a remote node") {
		t.Errorf("Worker() at a shipped module's top level: %v", err)
	}
}
