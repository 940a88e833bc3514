package remote

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"simpler/engine"
	"simpler/hal/shm"
	"simpler/internal/enginetest"
)

// nodeOrchRuns are node orchestrations beyond nodeOrch's "submit the
// kernel": by name, what the node runs instead.
var nodeOrchRuns = map[string]func(o *engine.Orchestrator, a *engine.TaskArgs) error{
	// node_domain allocates a domain over the node's chips 0 and 1 (the
	// run releases it), then adds one on chip 0 as node_add1 does.
	"node_domain": func(o *engine.Orchestrator, a *engine.TaskArgs) error {
		if _, err := o.AllocateDomain(engine.DomainSpec{Name: "squatted", Workers: []int{0, 1}, WindowSize: 4096}); err != nil {
			return err
		}
		h, ok := o.Worker().Registry().Lookup(procKernel{"add1"}.Digest())
		if !ok {
			return engine.Errorf(engine.ValueError, "add1 not registered on the node")
		}
		_, err := o.SubmitNext(h, a, nil, 0)
		return err
	},
}

func init() {
	procKernels["domain"] = procKernels["noop"] // so that the session resolves node_domain
}

// squatNames are the names another user who lists /dev/shm could expect
// this daemon's objects to take next, under each prefix it sees there and
// the old pid form of each pid: remote buffers and inline scratch by a
// counter, domain headers and windows by namespace and allocation id,
// pool names, and the prefix's lock.
func squatNames(prefixes []string, pids []int) []string {
	for _, pid := range pids {
		prefixes = append(prefixes, "simpler-"+strconv.Itoa(pid)+"-")
	}
	var names []string
	for _, p := range prefixes {
		names = append(names, p+"live")
		for n := 1; n <= 64; n++ {
			names = append(names, fmt.Sprintf("%srbuf-%d", p, n), fmt.Sprintf("%sinline-%d", p, n), fmt.Sprintf("%sdompool-%d", p, n))
		}
		for ns := 1; ns <= 4; ns++ {
			for id := 1; id <= 16; id++ {
				for _, suffix := range []string{"hdr", "r0", "r1"} {
					names = append(names, fmt.Sprintf("%sdom-w%d-%d-%s", p, ns, id, suffix))
				}
			}
		}
	}
	return names
}

// Name squatting against a real daemon on 127.0.0.1: another user (as
// root, really uid 65534) lists /dev/shm and creates every name this
// daemon's session could be expected to take next. REMOTE_MALLOC and
// allocate_domain still succeed in that session, and a new client is
// served right after.
func TestAttackNameSquatting(t *testing.T) {
	d, addr := startDaemon(t)
	w := remoteWorker(t, addr)
	register(t, w, nodeOrch{procKernel{"node_domain"}})
	first := enginetest.Must(outside(w).Malloc(0, 8)) // the session's prefix is in /dev/shm from now on
	var prefixes []string
	var pids []int
	d.mu.Lock()
	for _, s := range d.sessions {
		prefixes = append(prefixes, s.prefix)
		pids = append(pids, s.cmd.Process.Pid)
	}
	d.mu.Unlock()
	if len(prefixes) != 1 {
		t.Fatalf("%d sessions, want 1", len(prefixes))
	}
	if left, _ := shm.Leftovers(prefixes[0]); len(left) == 0 {
		t.Fatalf("the session's prefix %s shows no object: the squatter would see nothing", prefixes[0])
	}
	names := squatNames(append(prefixes, shm.Prefix()), append(pids, os.Getpid()))
	squat(t, names)

	// The session allocates buffers and domains as if nothing were there.
	var bufs []*engine.RemoteBuffer
	for range 32 {
		b, err := outside(w).Malloc(0, 8)
		if err != nil {
			t.Fatalf("REMOTE_MALLOC with the names squatted: %v", err)
		}
		bufs = append(bufs, b)
	}
	sp := newSpace(t)
	host, hb := hostI64(t, sp, 1)
	node, _ := w.Registry().Lookup(nodeOrch{procKernel{"node_domain"}}.Digest())
	ref := remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: host.DType}, Ref: engine.RemoteRef{Buf: first}}
	for range 3 {
		mustRun(t, w, func(o *engine.Orchestrator) error {
			_, err := o.SubmitNext(node, mkArgs(ref, engine.InOut), nil, 0)
			return err
		})
	}
	if err := outside(w).CopyFrom(first, hb, 0); err != nil || get64(hb) != 3 {
		t.Fatalf("after 3 runs that each allocated a domain: %d, %v; want 3", get64(hb), err)
	}
	for _, b := range bufs {
		if err := Free(b); err != nil {
			t.Fatal(err)
		}
	}

	// A new client, with a session of its own, is served.
	w2 := remoteWorker(t, addr)
	b := enginetest.Must(outside(w2).Malloc(0, 8))
	put64(hb, 41)
	if err := outside(w2).CopyTo(b, hb, 0); err != nil {
		t.Fatal(err)
	}
	add1, _ := w2.Registry().Lookup(nodeOrch{procKernel{"node_add1"}}.Digest())
	mustRun(t, w2, func(o *engine.Orchestrator) error {
		_, err := o.SubmitNext(add1, mkArgs(remoteTensor{Tensor: engine.Tensor{Shape: []int{1}, DType: host.DType}, Ref: engine.RemoteRef{Buf: b}}, engine.InOut), nil, 0)
		return err
	})
	if err := outside(w2).CopyFrom(b, hb, 0); err != nil || get64(hb) != 42 {
		t.Fatalf("a new client after the squatting: %d, %v; want 42", get64(hb), err)
	}
}

// squat creates names in /dev/shm as another user (uid 65534 when this
// runs as root; as this user otherwise, which /dev/shm's checks refuse
// all the same) and removes them when the test ends. Names that exist
// already (the prefixes' locks) are left as they are: the squatter cannot
// open them.
func squat(t *testing.T, names []string) {
	t.Helper()
	script := `cd /dev/shm || exit 1
ls >/dev/null
n=0
for name in "$@"; do
	if [ ! -e "$name" ] && : >"$name" 2>/dev/null; then n=$((n+1)); fi
done
echo "$n"`
	args := append([]string{"-c", script, "squatter"}, names...)
	cmd := exec.Command("sh", args...)
	if os.Geteuid() == 0 {
		cmd = exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "sh"}, args...)...)
	} else {
		t.Log("not root: squatting as this user")
	}
	existed := map[string]bool{}
	for _, n := range names {
		if _, err := os.Lstat("/dev/shm/" + n); err == nil {
			existed[n] = true
		}
	}
	out, err := cmd.Output()
	t.Cleanup(func() {
		for _, n := range names {
			if !existed[n] {
				os.Remove("/dev/shm/" + n)
			}
		}
	})
	if err != nil {
		t.Fatalf("the squatter: %v", err)
	}
	made, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	if made < len(names)/2 {
		t.Fatalf("the squatter made %d of %d names", made, len(names))
	}
	t.Logf("another user made %d names in /dev/shm", made)
}

// A session killed with its buffers allocated skips its cleanup; the
// daemon, once it has reaped it, sweeps the session's prefix (its lock is
// free: proven dead), and serves the next client.
func TestKilledSessionIsSwept(t *testing.T) {
	d, addr := startDaemon(t)
	w := remoteWorker(t, addr)
	for range 4 {
		enginetest.Must(outside(w).Malloc(0, 4096))
	}
	d.mu.Lock()
	var prefix string
	for _, s := range d.sessions {
		prefix = s.prefix
	}
	d.mu.Unlock()
	if left, _ := shm.Leftovers(prefix); len(left) < 4 {
		t.Fatalf("the session's objects: %v, want 4 buffers or more", left)
	}
	for _, p := range sessionProcs(d) {
		p.Kill()
	}
	poll(t, "the killed session to be reaped", func() bool { return len(sessionProcs(d)) == 0 })
	if left, _ := shm.Leftovers(prefix); len(left) > 0 {
		t.Errorf("the killed session's objects are left: %v", left)
	}
	if _, err := os.Lstat("/dev/shm/" + shm.LockName(prefix)); err == nil {
		t.Error("the killed session's lock is left")
	}
	w.Close()
	w2 := remoteWorker(t, addr)
	if _, err := outside(w2).Malloc(0, 8); err != nil {
		t.Fatalf("the next client: %v", err)
	}
}
