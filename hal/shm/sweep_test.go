package shm

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// holderEnv makes this test binary a holder: it creates objects under the
// prefix it inherits (PrefixEnv), prints its pid and their names, and
// waits for its stdin to close. Then, with the value "crash", it exits
// without cleaning up, as a killed process would; with "clean" it closes
// them and finishes.
const holderEnv = "SHM_TEST_HOLDER"

func runHolder() int {
	var segs []*Segment
	for range 3 {
		s, err := Create("held", 4096)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		segs = append(segs, s)
	}
	line := []string{strconv.Itoa(os.Getpid())}
	for _, s := range segs {
		line = append(line, s.Name)
	}
	fmt.Println(strings.Join(line, " "))
	io.Copy(io.Discard, os.Stdin)
	if os.Getenv(holderEnv) == "crash" {
		return 0
	}
	for _, s := range segs {
		s.Close()
	}
	Finish()
	return 0
}

// holder is a running holder process.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	pid   int      // its pid as it sees it
	names []string // its objects
}

// startHolder runs a holder under prefix p, in a pid namespace of its own
// if pidns (as root, a plain "unshare --pid"; otherwise inside a user
// namespace too, whose root is this user). It returns once the holder has
// made its objects; cleanup ends it.
func startHolder(t *testing.T, p, mode string, pidns bool) *holder {
	t.Helper()
	self := []string{os.Args[0], "-test.run=^$"}
	cmd := exec.Command(self[0], self[1:]...)
	if pidns {
		args := []string{"--pid", "--fork", "--kill-child"}
		if os.Geteuid() != 0 {
			args = append([]string{"--user", "--map-root-user"}, args...)
		}
		cmd = exec.Command("unshare", append(args, self...)...)
	}
	// GORACE: a race-enabled holder would otherwise linger a second at exit.
	cmd.Env = append(os.Environ(), holderEnv+"="+mode, PrefixEnv+"="+p, "GORACE=atexit_sleep_ms=0")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, stdin: stdin}
	t.Cleanup(h.end)
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
	}()
	var l string
	select {
	case l = <-line:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the holder did not report its objects")
	}
	f := strings.Fields(l)
	if len(f) != 4 {
		t.Fatalf("the holder said %q", l)
	}
	h.pid, _ = strconv.Atoi(f[0])
	h.names = f[1:]
	return h
}

// end closes the holder's stdin and waits for it to exit.
func (h *holder) end() {
	if h.stdin != nil {
		h.stdin.Close()
		h.stdin = nil
		h.cmd.Wait()
	}
}

func exists(name string) bool {
	_, err := os.Lstat(dir + "/" + name)
	return err == nil
}

// A holder in another pid namespace that shares /dev/shm (a container
// run with --ipc=host): its pid means nothing here, and its objects
// survive a sweep while it lives; once it is gone without cleaning up,
// the sweep removes them and their lock.
func TestSweepLeavesALiveHolderInAnotherPidNamespace(t *testing.T) {
	p := NewPrefix()
	h := startHolder(t, p, "crash", true)
	if h.pid != 1 {
		t.Fatalf("the holder is pid %d in its namespace, want 1 (a pid namespace of its own)", h.pid)
	}
	removed, err := SweepDead()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range append(h.names, LockName(p)) {
		if slices.Contains(removed, n) || !exists(n) {
			t.Errorf("the sweep removed %s of a live holder (removed %v)", n, removed)
		}
	}
	h.end()
	for _, n := range h.names {
		if !exists(n) {
			t.Fatalf("the holder removed %s; it was to exit without cleaning up", n)
		}
	}
	removed, err = SweepDead()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range append(h.names, LockName(p)) {
		if !slices.Contains(removed, n) || exists(n) {
			t.Errorf("the sweep left %s of a dead holder (removed %v)", n, removed)
		}
	}
}

// The sweep removes only what it can prove dead: a prefix whose lock it
// takes. A prefix without a lock object, names of the old pid form, this
// process's own live objects and another user's lock or objects stay.
func TestSweepLeavesWhatItCannotProveDead(t *testing.T) {
	write := func(name string) {
		t.Helper()
		if err := os.WriteFile(dir+"/"+name, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(dir + "/" + name) })
	}
	dead, unlocked, foreign := NewPrefix(), NewPrefix(), NewPrefix()
	deadNames := []string{dead + "rbuf-1", dead + "dom-w1-2-r0", LockName(dead)}
	for _, n := range deadNames {
		write(n)
	}
	kept := []string{unlocked + "rbuf-1", "simpler-2147483646-rbuf-1", "simpler-1-rbuf-1", foreign + "rbuf-1", LockName(foreign)}
	for _, n := range kept {
		write(n)
	}
	// Another user's lock: as root, really another user's; otherwise
	// this process stands in for another user.
	if os.Geteuid() == 0 {
		for _, n := range []string{foreign + "rbuf-1", LockName(foreign)} {
			if err := os.Chown(dir+"/"+n, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Another user's object under a dead prefix is theirs, not a leftover.
	theirs := dead + "planted"
	write(theirs)
	if os.Geteuid() == 0 {
		if err := os.Chown(dir+"/"+theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	own, err := Create("sweeptest", 64)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if os.Geteuid() != 0 {
		real := os.Geteuid()
		euid = func() int { return real + 1 } // the foreign files, as another user sees ours
		defer func() { euid = os.Geteuid }()
		t.Log("not root: the foreign lock is this user's, refused as if another's")
	}
	removed, err := SweepDead()
	euid = os.Geteuid
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		for _, n := range deadNames {
			if !slices.Contains(removed, n) || exists(n) {
				t.Errorf("the dead prefix's %s was not removed (removed %v)", n, removed)
			}
		}
		// The lock goes last, so it is the last name removed of its prefix.
		if i := slices.Index(removed, LockName(dead)); i >= 0 && (i == 0 || !strings.HasPrefix(removed[i-1], dead)) {
			t.Errorf("the lock was not removed right after its objects: %v", removed)
		}
	}
	for _, n := range append(kept, own.Name, LockName(Prefix()), theirs) {
		if slices.Contains(removed, n) || !exists(n) {
			t.Errorf("the sweep removed %s, which it cannot prove dead (removed %v)", n, removed)
		}
	}
}

// The lock is held from the first object on, a second holder in the same
// family (a child started with ChildEnv) keeps it alive after this
// process lets go, and RemoveOwn removes only this process's objects.
func TestLockAndRemoveOwnWithAFamily(t *testing.T) {
	s, err := Create("own", 64)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lock := LockName(Prefix())
	fd, _, err := openChecked(lock)
	if err != nil {
		t.Fatalf("no lock while an object exists: %v", err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err == nil {
		t.Error("the lock could be taken exclusively while this process has an object")
	}
	unix.Close(fd)
	Finish() // with an object left: changes nothing
	if !exists(lock) || !exists(s.Name) {
		t.Fatal("Finish removed the lock or an object while an object was left")
	}

	env, err := ChildEnv()
	if err != nil || env != PrefixEnv+"="+Prefix() {
		t.Fatalf("ChildEnv() = %q, %v", env, err)
	}
	h := startHolder(t, Prefix(), "clean", false)
	RemoveOwn()
	if exists(s.Name) {
		t.Error("RemoveOwn left this process's object")
	}
	for _, n := range h.names {
		if !exists(n) {
			t.Errorf("RemoveOwn removed %s, the object of another process of the family", n)
		}
	}
	if !exists(lock) {
		t.Fatal("RemoveOwn removed the lock another process holds")
	}
	if removed, _ := SweepDead(); slices.ContainsFunc(removed, func(n string) bool { return strings.HasPrefix(n, Prefix()) }) {
		t.Errorf("the sweep removed objects of a live family: %v", removed)
	}
	h.end() // the last holder: its Finish removes the lock
	if left, _ := Leftovers(Prefix()); len(left) > 0 || exists(lock) {
		t.Errorf("after the family ended: objects %v, lock there %v", left, exists(lock))
	}
	// A new object takes the lock again.
	s2, err := Create("own", 64)
	if err != nil {
		t.Fatal(err)
	}
	if !exists(lock) {
		t.Error("an object without the lock")
	}
	s2.Close()
}

// What a process of the family left when it was killed is removed by the
// last process to let go of the prefix (Finish): removing the lock alone
// would leave those objects with nothing to prove them dead.
func TestFinishRemovesWhatTheFamilyLeft(t *testing.T) {
	if _, err := ChildEnv(); err != nil {
		t.Fatal(err)
	}
	h := startHolder(t, Prefix(), "crash", false)
	h.end()
	for _, n := range h.names {
		if !exists(n) {
			t.Fatalf("the holder removed %s; it was to exit without cleaning up", n)
		}
	}
	if removed, _ := SweepDead(); slices.ContainsFunc(removed, func(n string) bool { return strings.HasPrefix(n, Prefix()) }) {
		t.Fatalf("the sweep removed objects of a prefix this process holds: %v", removed)
	}
	Finish()
	for _, n := range append(h.names, LockName(Prefix())) {
		if exists(n) {
			t.Errorf("Finish left %s", n)
		}
	}
}

// A lock object another user made under a prefix is not this user's lock:
// a process under that prefix refuses to create (it could not prove its
// objects alive) and leaves nothing behind.
func TestCreateRefusesAnotherUsersLock(t *testing.T) {
	p := NewPrefix()
	lock := dir + "/" + LockName(p)
	if err := os.WriteFile(lock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(lock)
	if os.Geteuid() == 0 {
		if err := os.Chown(lock, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	} else {
		if err := os.Chmod(lock, 0o644); err != nil { // not 0600: refused as another's would be
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"=crash", PrefixEnv+"="+p, "GORACE=atexit_sleep_ms=0")
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.Output()
	if err == nil || !strings.HasPrefix(string(out), "error RuntimeError: shm: the lock of "+p) || !strings.Contains(string(out), ErrNotOurs.Error()) {
		t.Errorf("a holder under a squatted lock: %v, said %q", err, out)
	}
	if left, _ := Leftovers(p); len(left) > 0 {
		t.Errorf("the refused creates left %v", left)
	}
}
