package shm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"simpler/kind"
)

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Exit(runHolder())
	}
	code := m.Run()
	left, err := Leftovers(Prefix())
	if err != nil || len(left) > 0 {
		fmt.Fprintf(os.Stderr, "leaked shared memory: %v %v\n", left, err)
		code = 1
	}
	Finish()
	if _, err := os.Lstat(dir + "/" + LockName(Prefix())); err == nil {
		fmt.Fprintf(os.Stderr, "the lock %s outlived Finish\n", LockName(Prefix()))
		code = 1
	}
	os.Exit(code)
}

func listed(t *testing.T, name string) bool {
	t.Helper()
	left, err := Leftovers(Prefix())
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(left, name)
}

// The prefix carries 64 random bits and nothing of the pid; every
// process draws its own.
func TestPrefix(t *testing.T) {
	if !ValidPrefix(Prefix()) || strings.Contains(Prefix(), strconv.Itoa(os.Getpid())) {
		t.Errorf("Prefix() = %q, want simpler-<16 hex digits>- and no pid", Prefix())
	}
	a, b := NewPrefix(), NewPrefix()
	if a == b || !ValidPrefix(a) || a == Prefix() {
		t.Errorf("NewPrefix() = %q then %q", a, b)
	}
	for _, bad := range []string{"", "simpler-", "simpler-123-", "simpler-0123456789abcdef", "simpler-0123456789ABCDEF-", "simpler-0123456789abcdeg-", "other-0123456789abcdef-"} {
		if ValidPrefix(bad) {
			t.Errorf("ValidPrefix(%q) = true", bad)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	a, err := Create("test", 10000)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if !strings.HasPrefix(a.Name, Prefix()+"test-") || len(a.Mem) != 10000 {
		t.Fatalf("segment %q of %d bytes", a.Name, len(a.Mem))
	}
	if slices.ContainsFunc(a.Mem, func(b byte) bool { return b != 0 }) {
		t.Error("new segment not zeroed")
	}
	st, err := os.Stat("/dev/shm/" + a.Name)
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() != 10000 {
		t.Errorf("object stat: %v, %v", st, err)
	}
	copy(a.Mem[9000:], "written by a")

	b, err := Open(a.Name, 9500)
	if err != nil {
		t.Fatal(err)
	}
	if b.Addr() == a.Addr() || len(b.Mem) != 9500 {
		t.Errorf("second mapping at %#x (%d bytes), first at %#x", b.Addr(), len(b.Mem), a.Addr())
	}
	if got := string(b.Mem[9000:9012]); got != "written by a" {
		t.Errorf("second mapping sees %q", got)
	}
	copy(b.Mem, "and back")
	if got := string(a.Mem[:8]); got != "and back" {
		t.Errorf("first mapping sees %q", got)
	}
	// Closing a mapping that did not create the object leaves the name.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if !listed(t, a.Name) {
		t.Error("Close of an opener unlinked the object")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if listed(t, a.Name) {
		t.Error("Close of the creator left the object")
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestUnlink(t *testing.T) {
	a, err := Create("unlink", 100)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Unlink(); err != nil {
		t.Fatal(err)
	}
	if err := a.Unlink(); err != nil {
		t.Errorf("second Unlink: %v", err)
	}
	if listed(t, a.Name) {
		t.Error("name still present after Unlink")
	}
	a.Mem[99] = 1 // the mapping outlives the name
	_, err = Open(a.Name, 100)
	if !errors.Is(err, unix.ENOENT) || !strings.Contains(err.Error(), a.Name) {
		t.Errorf("Open after Unlink = %v", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("Close after Unlink: %v", err)
	}
}

func TestCreateNamed(t *testing.T) {
	name := Prefix() + "named"
	s, err := CreateNamed(name, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Name != name {
		t.Errorf("Name = %q", s.Name)
	}
	if _, err := CreateNamed(name, 64); !errors.Is(err, unix.EEXIST) || !strings.Contains(err.Error(), name) {
		t.Errorf("duplicate CreateNamed = %v", err)
	}
	for _, other := range []string{"other-name", "simpler-named", NewPrefix() + "named"} {
		if _, err := CreateNamed(other, 64); err == nil || !strings.Contains(err.Error(), "must start with this process's prefix") {
			t.Errorf("CreateNamed(%q) = %v", other, err)
		}
	}
	if _, err := CreateNamed(Prefix()+"a/b", 64); err == nil || !strings.Contains(err.Error(), "bad object name") {
		t.Errorf("CreateNamed with slash = %v", err)
	}
	if _, err := CreateNamed(LockName(Prefix()), 64); err == nil || !strings.Contains(err.Error(), "the prefix's lock") {
		t.Errorf("CreateNamed of the lock = %v", err)
	}
}

func TestBadArguments(t *testing.T) {
	for _, n := range []int{0, -1} {
		if s, err := Create("bad", n); err == nil || !strings.Contains(err.Error(), "size must be > 0") {
			t.Errorf("Create(size %d) = %v, %v", n, s, err)
		}
	}
	if _, err := Create("a/b", 8); err == nil || !strings.Contains(err.Error(), "bad tag") {
		t.Errorf("Create with slash in tag = %v", err)
	}
	s, err := Create("small", 100)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Open(s.Name, 0); err == nil || !strings.Contains(err.Error(), "size must be > 0") {
		t.Errorf("Open(size 0) = %v", err)
	}
	if _, err := Open(s.Name, 101); err == nil || !strings.Contains(err.Error(), "want 101 bytes but the object has 100") {
		t.Errorf("Open beyond the object = %v", err)
	}
	if _, err := Open(Prefix()+"missing", 8); !errors.Is(err, unix.ENOENT) {
		t.Errorf("Open of a missing object = %v", err)
	}
}

// Names Create makes are unique and unpredictable: each carries 64
// random bits after the tag, so neither the names listed so far nor their
// order tell the next one.
func TestNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 20; i++ {
		s, err := Create("uniq", 8)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if seen[s.Name] {
			t.Fatalf("name %q handed out twice", s.Name)
		}
		seen[s.Name] = true
		key, ok := strings.CutPrefix(s.Name, Prefix()+"uniq-")
		if _, err := strconv.ParseUint(key, 16, 64); !ok || len(key) != 16 || err != nil {
			t.Fatalf("name %q: want %suniq-<16 hex digits>", s.Name, Prefix())
		}
	}
	left, err := Leftovers(Prefix() + "uniq-")
	if err != nil || len(left) != 20 {
		t.Errorf("Leftovers = %d names, %v; want 20", len(left), err)
	}
}

// Open maps only objects this user made for simpler: never through a
// symlink, never another user's object, never a looser mode or a
// non-regular file. The target of a refused symlink is untouched.
func TestOpenRefusesWhatIsNotOurs(t *testing.T) {
	secret := t.TempDir() + "/secret"
	if err := os.WriteFile(secret, []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}
	name := Prefix() + "hostile-" + randomKey()
	path := dir + "/" + name
	cases := []struct {
		what string
		make func() error
	}{
		{"a symlink", func() error { return os.Symlink(secret, path) }},
		{"mode 0644", func() error { return os.WriteFile(path, make([]byte, 4096), 0o644) }},
		{"a directory", func() error { return os.Mkdir(path, 0o700) }},
		{"a fifo", func() error { return unix.Mkfifo(path, 0o600) }},
		{"another uid", func() error {
			if err := os.WriteFile(path, make([]byte, 4096), 0o600); err != nil {
				return err
			}
			if os.Geteuid() != 0 { // no chown without root: stand in for another user
				real := os.Geteuid()
				euid = func() int { return real + 1 }
				return nil
			}
			return os.Chown(path, os.Geteuid()+1, os.Getegid())
		}},
	}
	for _, c := range cases {
		err := c.make()
		if err != nil {
			os.Remove(path)
			t.Fatalf("%s: %v", c.what, err)
		}
		seg, err := Open(name, 4)
		if err == nil {
			seg.Close()
		}
		euid = os.Geteuid
		os.Remove(path)
		if !errors.Is(err, ErrNotOurs) {
			t.Errorf("%s: Open = %v, want ErrNotOurs", c.what, err)
		}
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "root only" {
		t.Errorf("the symlink's target changed: %q %v", b, err)
	}
}

// The unprivileged-user attack: another user plants a symlink in
// /dev/shm under a name this process would open; the open refuses it.
func TestOpenRefusesAnotherUsersSymlink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Log("not root: planting the symlink as this user instead of as nobody")
	}
	secret := t.TempDir() + "/secret"
	if err := os.WriteFile(secret, []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}
	name := Prefix() + "planted-" + randomKey()
	ln := exec.Command("ln", "-s", secret, dir+"/"+name)
	if os.Geteuid() == 0 {
		ln = exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "ln", "-s", secret, dir+"/"+name)
	}
	if out, err := ln.CombinedOutput(); err != nil {
		t.Fatalf("planting the symlink: %v: %s", err, out)
	}
	defer os.Remove(dir + "/" + name)
	if seg, err := Open(name, 4); err == nil || !errors.Is(err, ErrNotOurs) {
		if seg != nil {
			seg.Close()
		}
		t.Fatalf("Open of a planted symlink = %v, want ErrNotOurs", err)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "root only" {
		t.Errorf("the symlink's target changed: %q %v", b, err)
	}
}

// Reopen hands out a descriptor of the very object a Segment made, and
// OpenFD maps it with the same checks.
func TestReopenAndOpenFD(t *testing.T) {
	a, err := Create("reopen", 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	copy(a.Mem, "shared")
	fd, err := a.Reopen()
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenFD(fd, a.Name)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(b.Mem) != 8192 || string(b.Mem[:6]) != "shared" {
		t.Fatalf("OpenFD mapped %d bytes starting %q", len(b.Mem), b.Mem[:6])
	}
	// A name that now holds another object is refused.
	if err := a.Unlink(); err != nil {
		t.Fatal(err)
	}
	if fd, err := a.Reopen(); err == nil {
		unix.Close(fd)
		t.Fatal("Reopen after Unlink succeeded")
	}
	if _, err := b.Reopen(); err == nil {
		t.Fatal("Reopen of an opened (not created) segment succeeded")
	}
}

// Rename moves an object this process made to a fresh name of its prefix
// and no other: never over an existing object, never out of the prefix
// (whose lock keeps it alive), never once it is unlinked.
func TestRename(t *testing.T) {
	a, err := Create("rename", 64)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Create("rename", 64)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	to := Prefix() + "renamed-" + randomKey()
	if err := a.Rename(to); err != nil || a.Name != to || !listed(t, to) {
		t.Fatalf("Rename: %v; Name %q, listed %v", err, a.Name, listed(t, to))
	}
	if err := a.Rename(b.Name); !errors.Is(err, unix.EEXIST) || a.Name != to {
		t.Errorf("Rename over another object = %v (Name %q)", err, a.Name)
	}
	for _, bad := range []string{NewPrefix() + "x", "simpler-x", LockName(Prefix())} {
		if err := a.Rename(bad); kind.Of(err) != kind.ValueError || !strings.Contains(err.Error(), "not a name of this process's prefix") {
			t.Errorf("Rename to %q = %v, want a ValueError", bad, err)
		}
	}
	if _, err := CreateNamed(NewPrefix()+"x", 64); kind.Of(err) != kind.ValueError {
		t.Errorf("CreateNamed out of the prefix = %v, want a ValueError", err)
	}
	if err := a.Unlink(); err != nil {
		t.Fatal(err)
	}
	if err := a.Rename(Prefix() + "again-" + randomKey()); err == nil {
		t.Error("Rename after Unlink succeeded")
	}
	if slices.Contains(Owned(), a.Name) || !slices.Contains(Owned(), b.Name) {
		t.Errorf("Owned() = %v after unlinking %s", Owned(), a.Name)
	}
}
