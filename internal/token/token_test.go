package token

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"simpler/internal/leakcheck"
)

// TestMain runs the tests under leakcheck; run with writerEnv set, the
// test binary is a writer process for TestSweepStaleRemovesOnlyDeadWriters.
func TestMain(m *testing.M) {
	if port := os.Getenv(writerEnv); port != "" {
		os.Exit(runWriter(port))
	}
	leakcheck.Main(m)
}

// good is a token of an acceptable length.
const good = "0123456789abcdef0123"

// writeFile writes content to name in dir with exactly mode (the umask
// would otherwise take bits) and returns its path.
func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// wantRefusal checks that err is a ValueError holding every part.
func wantRefusal(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want a ValueError with %q", parts)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "ValueError: ") {
		t.Errorf("error %q does not start with \"ValueError: \"", msg)
	}
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("error %q does not contain %q", msg, p)
		}
	}
}

// useXDG points XDG_RUNTIME_DIR at a fresh temporary directory, so the
// runtime directory is <it>/simpler.
func useXDG(t *testing.T) string {
	t.Helper()
	xdg := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", xdg)
	return xdg
}

func TestReadGood(t *testing.T) {
	cases := map[string]string{
		"trailing newline and spaces": "  " + good + "  \n",
		"no newline":                  good,
		"crlf":                        good + "\r\n",
		"tabs":                        "\t" + good + "\t\n",
		"more lines":                  good + "\nnot the token\n",
		"exactly MinLen":              good[:MinLen] + "\n",
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "tok", content, 0o600)
			tok, err := Read(path)
			if err != nil {
				t.Fatal(err)
			}
			want := strings.TrimSpace(strings.SplitN(content, "\n", 2)[0])
			if string(tok) != want {
				t.Errorf("Read = %q, want %q", tok, want)
			}
		})
	}
}

func TestReadOwnerOnlyModes(t *testing.T) {
	for _, mode := range []os.FileMode{0o600, 0o400, 0o700} {
		path := writeFile(t, t.TempDir(), "tok", good+"\n", mode)
		if _, err := Read(path); err != nil {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
}

func TestReadRefusesGroupOrOtherAccess(t *testing.T) {
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o602, 0o610} {
		t.Run(strconv.FormatUint(uint64(mode), 8), func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "tok", good+"\n", mode)
			_, err := Read(path)
			wantRefusal(t, err, path, "mode "+"0"+strconv.FormatUint(uint64(mode), 8), "chmod 600 "+path)
		})
	}
}

func TestReadRefusesEmpty(t *testing.T) {
	for name, content := range map[string]string{
		"empty file":  "",
		"blank lines": "  \n\n",
		"first line":  "\n" + good + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "tok", content, 0o600)
			_, err := Read(path)
			wantRefusal(t, err, path, "no token", "head -c 32 /dev/urandom | base64 > "+path)
		})
	}
}

func TestReadRefusesShort(t *testing.T) {
	path := writeFile(t, t.TempDir(), "tok", " short \n", 0o600)
	_, err := Read(path)
	wantRefusal(t, err, path, "shorter than the minimum of 16 bytes", "head -c 32 /dev/urandom | base64 > "+path)
	noLength(t, err, 5)

	path = writeFile(t, t.TempDir(), "tok", good[:MinLen-1], 0o600)
	_, err = Read(path)
	wantRefusal(t, err, "shorter than the minimum")
	noLength(t, err, 15)
}

// noLength checks that a refusal does not tell how long the file or its
// first line is: a file that is not a token file may be a secret.
func noLength(t *testing.T, err error, n int) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), strconv.Itoa(n)+" bytes") {
		t.Errorf("refusal %q tells the length %d", err, n)
	}
}

func TestReadRefusesFifo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Read(path)
		done <- err
	}()
	select {
	case err := <-done:
		wantRefusal(t, err, path, "not a regular file", "named pipe")
	case <-time.After(10 * time.Second):
		t.Error("Read blocked on a fifo")
		unblockFifo(t, path)
		<-done
	}
}

// unblockFifo lets a Read blocked opening the fifo at path return: a writer
// opens it and closes it at once, so the reader sees end of file.
func unblockFifo(t *testing.T, path string) {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestReadRefusesDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dir")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := Read(path)
	wantRefusal(t, err, path, "not a regular file", "directory")
}

func TestReadRefusesOversized(t *testing.T) {
	big := good + "\n" + strings.Repeat("x", MaxFileSize-len(good))
	path := writeFile(t, t.TempDir(), "tok", big, 0o600)
	_, err := Read(path)
	wantRefusal(t, err, path, "larger than the 4096 bytes allowed")
	noLength(t, err, 4097)

	// One byte less is the largest file accepted.
	path = writeFile(t, t.TempDir(), "tok", big[:MaxFileSize], 0o600)
	if tok, err := Read(path); err != nil || string(tok) != good {
		t.Errorf("Read of a %d-byte file = %q, %v; want %q", MaxFileSize, tok, err, good)
	}
}

// A token file of another user is refused however private its mode, and
// so is a symlink, to it or to one of ours: the checks are of the file
// named, which must be our own regular file. As root the file really is
// given to nobody (uid 65534).
func TestReadRefusesAnotherUsersFileAndSymlinks(t *testing.T) {
	dir := t.TempDir()
	theirs := writeFile(t, dir, "theirs", good+"\n", 0o600)
	owned := "owned by uid 65534"
	if os.Geteuid() == 0 {
		if err := os.Chown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	} else {
		fileOwner = func(fi fs.FileInfo) (int, bool) {
			if fi.Name() == "theirs" {
				return 65534, true
			}
			return owner(fi)
		}
		t.Cleanup(func() { fileOwner = owner })
	}
	tok, err := Read(theirs)
	wantRefusal(t, err, theirs, owned, "not by us")
	if tok != nil {
		t.Errorf("Read returned %q with its refusal", tok)
	}

	ours := writeFile(t, dir, "ours", good+"\n", 0o600)
	for name, target := range map[string]string{"to-theirs": theirs, "to-ours": ours} {
		link := filepath.Join(dir, name)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		_, err := Read(link)
		wantRefusal(t, err, link, "is a symlink", "point at the token file itself")
	}
	// Our own file, named as itself, is read right after.
	if tok, err := Read(ours); err != nil || string(tok) != good {
		t.Errorf("Read(ours) = %q, %v; want %q", tok, err, good)
	}
}

// The same, with the other user real: as root, an unprivileged user
// (65534, by setpriv) writes their own private token file and a symlink
// to one of ours in a shared sticky directory, as an attacker would; Read
// refuses both, and still reads our own file.
func TestReadRefusesFilesPlantedByAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Log("not root: the other user is pretended (TestReadRefusesAnotherUsersFileAndSymlinks)")
		return
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatal("setpriv (util-linux) is needed to act as another user:", err)
	}
	// In /tmp itself: $TMPDIR may be a directory the other user cannot
	// enter.
	shared, err := os.MkdirTemp("/tmp", "simpler-token-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	ours := writeFile(t, t.TempDir(), "ours", good+"\n", 0o600)
	theirs, link := filepath.Join(shared, "theirs"), filepath.Join(shared, "link")
	plant := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c",
		`umask 077 && echo "$1" > "$2" && ln -s "$3" "$4"`, "sh", good, theirs, ours, link)
	if out, err := plant.CombinedOutput(); err != nil {
		t.Fatalf("planting as uid 65534: %v\n%s", err, out)
	}
	_, err = Read(theirs)
	wantRefusal(t, err, theirs, "owned by uid 65534, not by us (uid 0)")
	_, err = Read(link)
	wantRefusal(t, err, link, "is a symlink")
	if tok, err := Read(ours); err != nil || string(tok) != good {
		t.Errorf("Read(ours) = %q, %v; want %q", tok, err, good)
	}
}

func TestReadMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent")
	_, err := Read(path)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Read of a missing file: %v; want one wrapping os.ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name %s", err, path)
	}
}

func TestCheck(t *testing.T) {
	if err := Check([]byte(good)); err != nil {
		t.Errorf("Check(%q): %v", good, err)
	}
	if err := Check([]byte(good[:MinLen])); err != nil {
		t.Errorf("Check of MinLen bytes: %v", err)
	}
	wantRefusal(t, Check(nil), "empty", "head -c 32 /dev/urandom | base64")
	wantRefusal(t, Check([]byte("short")), "is 5 bytes", "minimum of 16", "head -c 32 /dev/urandom | base64")
}

func TestRuntimeDirXDG(t *testing.T) {
	xdg := useXDG(t)
	want := filepath.Join(xdg, "simpler")
	for range 2 { // creates it, then accepts it as it is
		dir, err := RuntimeDir()
		if err != nil {
			t.Fatal(err)
		}
		if dir != want {
			t.Errorf("RuntimeDir = %s, want %s", dir, want)
		}
		fi, err := os.Lstat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s has mode %v, want a directory with mode 0700", dir, fi.Mode())
		}
	}
}

func TestRuntimeDirRefusesOpenMode(t *testing.T) {
	dir := filepath.Join(useXDG(t), "simpler")
	for _, mode := range []os.FileMode{0o755, 0o750, 0o701} {
		if err := os.Mkdir(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		_, err := RuntimeDir()
		wantRefusal(t, err, dir, "mode 0"+strconv.FormatUint(uint64(mode), 8), "chmod 700 "+dir)
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRuntimeDirRefusesSymlink(t *testing.T) {
	dir := filepath.Join(useXDG(t), "simpler")
	target := t.TempDir() // a private directory: only the link is wrong
	if err := os.Symlink(target, dir); err != nil {
		t.Fatal(err)
	}
	_, err := RuntimeDir()
	wantRefusal(t, err, dir, "symlink", "rm "+dir)
}

func TestRuntimeDirRefusesFile(t *testing.T) {
	xdg := useXDG(t)
	dir := writeFile(t, xdg, "simpler", "", 0o600)
	_, err := RuntimeDir()
	wantRefusal(t, err, dir, "not a directory", "regular file")
}

// giveAway makes path another user's: as root by chown, else by making
// this package believe it runs as another uid. It returns the owner the
// refusal must name.
func giveAway(t *testing.T, path string) string {
	t.Helper()
	if os.Geteuid() == 0 {
		if err := os.Chown(path, 12345, 12345); err != nil {
			t.Fatal(err)
		}
		return "owned by uid 12345"
	}
	real := os.Geteuid()
	euid = func() int { return real + 1 }
	t.Cleanup(func() { euid = os.Geteuid })
	return fmt.Sprintf("owned by uid %d", real)
}

// giveAwayFile is giveAway for a token file alone.
func giveAwayFile(t *testing.T, path string) string {
	t.Helper()
	if os.Geteuid() == 0 {
		return giveAway(t, path)
	}
	fileOwner = func(fi fs.FileInfo) (int, bool) {
		if fi.Name() == filepath.Base(path) {
			return 12345, true
		}
		return owner(fi)
	}
	t.Cleanup(func() { fileOwner = owner })
	return "owned by uid 12345"
}

func TestRuntimeDirRefusesOtherOwner(t *testing.T) {
	dir := filepath.Join(useXDG(t), "simpler")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	owned := giveAway(t, dir)
	_, err := RuntimeDir()
	wantRefusal(t, err, dir, owned, "XDG_RUNTIME_DIR")
}

func TestRuntimeDirMissingXDG(t *testing.T) {
	xdg := filepath.Join(t.TempDir(), "absent")
	t.Setenv("XDG_RUNTIME_DIR", xdg)
	_, err := RuntimeDir()
	wantRefusal(t, err, xdg, "does not exist", "unset XDG_RUNTIME_DIR")
	if _, err := os.Lstat(xdg); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("RuntimeDir made the missing XDG_RUNTIME_DIR %s (Lstat: %v)", xdg, err)
	}
}

func TestRuntimeDirPath(t *testing.T) {
	cases := []struct {
		xdg  string
		uid  int
		want string
	}{
		{"", 1000, "/tmp/simpler-1000"},
		{"", 0, "/tmp/simpler-0"},
		{"relative/dir", 7, "/tmp/simpler-7"}, // the XDG spec says to ignore it
		{"/xdg/run", 1000, "/xdg/run/simpler"},
		{"/xdg/run/", 1000, "/xdg/run/simpler"},
	}
	for _, c := range cases {
		if got := runtimeDirPath(c.xdg, c.uid); got != c.want {
			t.Errorf("runtimeDirPath(%q, %d) = %s, want %s", c.xdg, c.uid, got, c.want)
		}
	}
}

func TestPathFor(t *testing.T) {
	xdg := useXDG(t)
	path, err := PathFor(7000)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(xdg, "simpler", "remote-l3-worker-7000.token"); path != want {
		t.Errorf("PathFor(7000) = %s, want %s", path, want)
	}
	for _, port := range []int{0, -1, 65536} {
		_, err := PathFor(port)
		wantRefusal(t, err, strconv.Itoa(port), "out of range")
	}
}

func TestGenerate(t *testing.T) {
	useXDG(t)
	path, tok, err := Generate(7001)
	if err != nil {
		t.Fatal(err)
	}
	defer Remove(path)
	if want, _ := PathFor(7001); path != want {
		t.Errorf("Generate wrote %s, want %s", path, want)
	}
	if len(tok) != 64 {
		t.Errorf("token %q is %d characters, want 64", tok, len(tok))
	}
	if raw, err := hex.DecodeString(string(tok)); err != nil || len(raw) != 32 {
		t.Errorf("token %q is not 32 hex-encoded bytes: %v", tok, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want a regular file with mode 0600", path, fi.Mode())
	}
	if got, err := Read(path); err != nil || !bytes.Equal(got, tok) {
		t.Errorf("Read(%s) = %q, %v; want %q", path, got, err, tok)
	}
	if err := Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is still there after Remove (Lstat: %v)", path, err)
	}
	if err := Remove(path); err != nil {
		t.Errorf("Remove of a file already gone: %v", err)
	}
}

func TestGenerateReplacesStale(t *testing.T) {
	useXDG(t)
	path, old, err := Generate(7002)
	if err != nil {
		t.Fatal(err)
	}
	defer Remove(path)
	// A stale file in any mode, as a crashed daemon may leave it.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	again, tok, err := Generate(7002)
	if err != nil {
		t.Fatal(err)
	}
	if again != path {
		t.Errorf("second Generate wrote %s, want %s", again, path)
	}
	if bytes.Equal(tok, old) {
		t.Errorf("second Generate made the same token %q", tok)
	}
	if got, err := Read(path); err != nil || !bytes.Equal(got, tok) {
		t.Errorf("Read(%s) = %q, %v; want the new token %q", path, got, err, tok)
	}
}

func TestGenerateRefusesSymlink(t *testing.T) {
	useXDG(t)
	path, err := PathFor(7003)
	if err != nil {
		t.Fatal(err)
	}
	target := writeFile(t, t.TempDir(), "precious", "keep me\n", 0o644)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	_, _, err = Generate(7003)
	wantRefusal(t, err, path, "not a regular file", "symlink", "remove it by hand")
	if got, err := os.ReadFile(target); err != nil || string(got) != "keep me\n" {
		t.Errorf("symlink target now holds %q (%v); want it untouched", got, err)
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("symlink target mode changed: %v, %v", fi.Mode(), err)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the symlink at %s was not left alone: %v", path, err)
	}
}

func TestGenerateRefusesOtherOwner(t *testing.T) {
	useXDG(t)
	path, err := PathFor(7004)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Dir(path), filepath.Base(path), "theirs\n", 0o600)
	owned := giveAwayFile(t, path)
	_, _, err = Generate(7004)
	wantRefusal(t, err, path, owned, "remove it by hand")
	if got, _ := os.ReadFile(path); string(got) != "theirs\n" {
		t.Errorf("%s now holds %q; want it untouched", path, got)
	}
}

func TestForEndpointLoopback(t *testing.T) {
	useXDG(t)
	path, tok, err := Generate(7005)
	if err != nil {
		t.Fatal(err)
	}
	defer Remove(path)
	for _, endpoint := range []string{
		"127.0.0.1:7005",
		"127.8.9.10:7005",
		"[::1]:7005",
		"localhost:7005",
		"LocalHost:7005",
		"[::ffff:127.0.0.1]:7005",
	} {
		got, err := ForEndpoint(endpoint)
		if err != nil || !bytes.Equal(got, tok) {
			t.Errorf("ForEndpoint(%s) = %q, %v; want %q", endpoint, got, err, tok)
		}
	}
}

func TestForEndpointMissing(t *testing.T) {
	useXDG(t)
	path, err := PathFor(7006)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ForEndpoint("127.0.0.1:7006")
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ForEndpoint with no token file: %v; want one wrapping os.ErrNotExist", err)
	}
	for _, part := range []string{path, "port 7006", "prints the path", "explicitly"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not contain %q", err, part)
		}
	}
}

func TestForEndpointOtherHost(t *testing.T) {
	useXDG(t)
	for _, endpoint := range []string{"10.1.2.3:7007", "example.com:7007", "[2001:db8::1]:7007", "0.0.0.0:7007"} {
		_, err := ForEndpoint(endpoint)
		wantRefusal(t, err, endpoint, "another host", "pass the token explicitly")
	}
}

func TestForEndpointBadEndpoint(t *testing.T) {
	useXDG(t)
	cases := map[string]string{
		"localhost":       "not host:port",
		"localhost:http":  "not a number",
		"127.0.0.1:0":     "out of range",
		"127.0.0.1:70000": "out of range",
	}
	for endpoint, part := range cases {
		_, err := ForEndpoint(endpoint)
		wantRefusal(t, err, part)
	}
}
