package main

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"simpler/internal/token"
	"simpler/wire"
)

// runDaemon runs `simpler remote-l3-worker ARGS` to its end and returns
// its exit code and stderr.
func runDaemon(t *testing.T, args ...string) (int, string) {
	t.Helper()
	exe, _ := os.Executable()
	c := exec.Command(exe, append([]string{"remote-l3-worker", "--listen", "127.0.0.1:0"}, args...)...)
	c.Env = cliEnv()
	var stderr strings.Builder
	c.Stderr = &stderr
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stderr.String()
}

// A token file others can read, one holding a short token, one of
// another user and a symlink are refused with a message that says how to
// fix it, and a daemon with its own token file starts right after.
func TestDaemonRefusesWeakTokenFiles(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte("0123456789abcdef0123\n"), 0o644)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("x\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	cases := []struct{ file, want string }{
		{open, "has mode 0644: group and others must have no access; run `chmod 600 " + open},
		{short, "shorter than the minimum of 16 bytes"},
		{empty, "holds no token"},
		{filepath.Join(dir, "missing"), "does not exist"},
	}
	// A private token file of another user, and symlinks to it or to one
	// of ours: the daemon reads only its own regular file. Only root can
	// give a file away; as another user the owner check is
	// internal/token's TestReadRefusesAnotherUsersFileAndSymlinks.
	ours := filepath.Join(dir, "ours")
	os.WriteFile(ours, []byte("0123456789abcdef0123\n"), 0o600)
	toOurs := filepath.Join(dir, "to-ours")
	os.Symlink(ours, toOurs)
	cases = append(cases, struct{ file, want string }{toOurs, "is a symlink; point at the token file itself"})
	if os.Geteuid() == 0 {
		theirs := filepath.Join(dir, "theirs")
		os.WriteFile(theirs, []byte("0123456789abcdef0123\n"), 0o600)
		if err := os.Chown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		toTheirs := filepath.Join(dir, "to-theirs")
		os.Symlink(theirs, toTheirs)
		cases = append(cases, struct{ file, want string }{theirs, "is owned by uid 65534, not by us (uid 0); a token file must be our own"},
			struct{ file, want string }{toTheirs, "is a symlink"})
	}
	for _, c := range cases {
		code, stderr := runDaemon(t, "--token-file", c.file)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("--token-file %s: exit %d, %q; want 2 and %q", filepath.Base(c.file), code, stderr, c.want)
		}
		if strings.Contains(stderr, "0123456789abcdef") {
			t.Errorf("--token-file %s: the refusal carries the file's content: %q", filepath.Base(c.file), stderr)
		}
	}
	// Our own file, named as itself, still serves.
	exe, _ := os.Executable()
	d := exec.Command(exe, "remote-l3-worker", "--listen", "127.0.0.1:0", "--token-file", ours)
	d.Env = cliEnv()
	out, err := d.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		d.Process.Signal(os.Interrupt)
		d.Wait()
	}()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.HasPrefix(line, "simpler remote-l3-worker: listening on ") {
		t.Errorf("a daemon with our own token file: %q, %v", line, err)
	}
}

// Without --token-file the daemon makes a token, 0600, where clients on
// this host find it, says where, and removes it when it stops.
func TestDaemonGeneratesItsToken(t *testing.T) {
	exe, _ := os.Executable()
	d := exec.Command(exe, "remote-l3-worker", "--listen", "127.0.0.1:0")
	d.Env = cliEnv()
	out, _ := d.StdoutPipe()
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	first, _ := r.ReadString('\n')
	second, _ := r.ReadString('\n')
	addr := strings.TrimPrefix(strings.TrimSpace(first), "simpler remote-l3-worker: listening on ")
	path, ok := strings.CutPrefix(strings.TrimSpace(second), "simpler remote-l3-worker: token in ")
	path, _, _ = strings.Cut(path, " ")
	_, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	want, _ := token.PathFor(n)
	if !ok || path != want {
		t.Errorf("the daemon said %q, want the token in %s", second, want)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("token file %v %v", st, err)
	}
	if tok, err := token.ForEndpoint(addr); err != nil || len(tok) < token.MinLen {
		t.Errorf("a client finds %q, %v", tok, err)
	}
	d.Process.Signal(os.Interrupt)
	d.Wait()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the token file outlived its daemon: %v", err)
	}
}

// A shipped module whose top level never ends is stopped by the daemon's
// step bound, and a session whose parent disconnects while it loads ends
// within its grace instead of burning a core.
func TestDaemonBoundsShippedModules(t *testing.T) {
	d, addr := startRemoteDaemon(t)
	loop := wire.Bundle{Root: "main.star", Modules: []wire.Module{{Name: "main.star", Source: []byte("def k(chip, args):\n    pass\n\nfor i in range(1 << 60):\n    pass\n")}}}
	c := dialDaemon(t, addr)
	c.control(t, &wire.Control{Cmd: wire.CmdBundle, Bundle: loop}, "")
	start := time.Now()
	c.control(t, &wire.Control{Cmd: wire.CmdRegister, Digest: "sha256:x", Module: "main.star", Name: "k"}, "too many steps loading main.star")
	if el := time.Since(start); el > 20*time.Second {
		t.Errorf("the step bound took %v", el)
	}
	c.conn.Close()

	// The parent goes away mid-load: the session process ends.
	c = dialDaemon(t, addr)
	c.control(t, &wire.Control{Cmd: wire.CmdBundle, Bundle: loop}, "")
	pids := childPids(d.Process.Pid)
	if len(pids) != 1 {
		t.Fatalf("session processes: %v", pids)
	}
	c.send(t, wire.TypeControl, &wire.Control{Cmd: wire.CmdRegister, Digest: "sha256:x", Module: "main.star", Name: "k"})
	c.conn.Close()
	deadline := time.Now().Add(5 * time.Second)
	for len(childPids(d.Process.Pid)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the session outlived its parent's disconnect: %v", childPids(d.Process.Pid))
		}
		time.Sleep(20 * time.Millisecond) // polling the process table
	}
}

// childPids lists the live children of pid.
func childPids(pid int) []int {
	var kids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) >= 2 && f[0] != "Z" && f[1] == strconv.Itoa(pid) {
			n, _ := strconv.Atoi(e.Name())
			kids = append(kids, n)
		}
	}
	return kids
}

// daemonConn is a parent written by hand, for what a real one never sends.
type daemonConn struct {
	conn    net.Conn
	session uint64
	seq     uint64
}

// lastSession numbers the sessions dialDaemon asks for: a daemon refuses
// an id that is still live, and a session closed a moment ago may be.
var lastSession atomic.Uint64

func dialDaemon(t *testing.T, addr string) *daemonConn {
	t.Helper()
	tok, err := token.ForEndpoint(addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	_, p, err := wire.ReadFrame(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	ch, _ := wire.DecodeChallenge(p)
	session := lastSession.Add(1)
	hello := &wire.Hello{Version: wire.ProtocolVersion, Parent: 7, Platform: "a2a3sim", DeviceIDs: []int{0}, CommProfile: "sim",
		Proof: wire.Prove(tok, ch.Nonce, session, 7)}
	wire.WriteFrame(c, wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeHello, Session: session}, wire.Payload(hello))
	if _, p, err = wire.ReadFrame(c, 0); err != nil {
		t.Fatal(err)
	}
	if r, err := wire.DecodeHelloReply(p); err != nil || !r.Accepted {
		t.Fatalf("handshake: %+v %v", r, err)
	}
	return &daemonConn{conn: c, session: session}
}

func (c *daemonConn) send(t *testing.T, typ wire.Type, m wire.Message) {
	t.Helper()
	c.seq++
	if err := wire.WriteFrame(c.conn, wire.Header{Version: wire.ProtocolVersion, Type: typ, Session: c.session, Seq: c.seq}, wire.Payload(m)); err != nil {
		t.Fatal(err)
	}
}

// control sends m and checks its reply: success, or an error containing
// want.
func (c *daemonConn) control(t *testing.T, m *wire.Control, want string) {
	t.Helper()
	c.send(t, wire.TypeControl, m)
	_, p, err := wire.ReadFrame(c.conn, 0)
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	r, err := wire.DecodeControlReply(p)
	switch {
	case err != nil:
		t.Fatalf("%s: %v", m.Cmd, err)
	case want == "" && r.Err != nil:
		t.Fatalf("%s: %v", m.Cmd, r.Err)
	case want != "" && (r.Err == nil || !strings.Contains(r.Err.Message, want)):
		t.Fatalf("%s: %+v, want an error containing %q", m.Cmd, r.Err, want)
	}
}

// A remote session whose level-4 parent is killed while its kernel loops
// for ever stops the kernel and exits within its 2 s grace.
func TestOrphanSessionEnds(t *testing.T) {
	d, addr := startRemoteDaemon(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"main.star": `
def spin(chip, args):
    args.tensor(0).fill(1)
    while True:
        pass

def node(o, args, cfg):
    o.submit_next_level(spin, TaskArgs(tensors = [(args.tensor(0), OUTPUT_EXISTING)]), worker = 0)

def main(ctx):
    w = Worker(level = 4, platform = ctx.platform)
    w.add_remote_worker(endpoint = ctx.argv[0], platform = ctx.platform, device_ids = [0])
    w.register(spin)
    w.register(node)
    w.init()
    h = w.remote_malloc(worker = 0, nbytes = 4)
    run = w.submit(lambda o, a, c: o.submit_next_level(node, TaskArgs(tensors = [(RemoteTensorRef(h, shape = [1]), OUTPUT_EXISTING)]), worker = 0))
    print("submitted")
    run.wait()
`})
	exe, _ := os.Executable()
	run := exec.Command(exe, "run", filepath.Join(dir, "main.star"), addr)
	run.Env = cliEnv()
	stdout, _ := run.StdoutPipe()
	run.Stderr = os.Stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); strings.TrimSpace(line) != "submitted" {
		run.Process.Kill()
		run.Wait()
		t.Fatalf("script said %q", line)
	}
	awaitSpinning(t, "the kernel to spin in the session", func() []int { return childPids(d.Process.Pid) })
	sessions := childPids(d.Process.Pid)
	if len(sessions) != 1 {
		t.Fatalf("sessions: %v", sessions)
	}
	run.Process.Kill()
	run.Wait()
	start := time.Now()
	for len(childPids(d.Process.Pid)) > 0 {
		if time.Since(start) > 3*time.Second {
			t.Fatalf("the session outlived its parent by %v", time.Since(start))
		}
		time.Sleep(20 * time.Millisecond) // polling the process table
	}
	t.Logf("the session ended %v after its parent", time.Since(start))
}
