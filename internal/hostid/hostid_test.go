package hostid

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"simpler/internal/leakcheck"
)

const childEnv = "SIMPLER_HOSTID_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		id := Local()
		os.Stdout.WriteString(id.Long() + "\n")
		os.Exit(0)
	}
	leakcheck.Main(m)
}

// Two processes on this host get the same ID; its name is what wire.Host
// carries.
func TestLocalIsTheSameInAnotherProcess(t *testing.T) {
	id := Local()
	if id.Name == "" || strings.ContainsAny(id.Name, " \t\n") || len(id.Name) > 255 {
		t.Fatalf("name %q is not a wire host name", id.Name)
	}
	if id.Key == ([32]byte{}) {
		t.Fatal("zero key")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != id.Long() {
		t.Errorf("another process on this host: %q, this one %q", got, id.Long())
	}
}

func TestNames(t *testing.T) {
	a, b, c := ID{Name: "a", Key: [32]byte{1}}, ID{Name: "b", Key: [32]byte{2}}, ID{Name: "a", Key: [32]byte{3}}
	if got := strings.Join(Names([]ID{a, b, a}), ","); got != "a,b" {
		t.Errorf("Names = %q", got)
	}
	got := Names([]ID{a, c})
	if len(got) != 2 || got[0] == got[1] || !strings.HasPrefix(got[0], "a (host key ") {
		t.Errorf("two hosts named a: %q", got)
	}
	if clean("a b\x00é") != "a_b__" {
		t.Errorf("clean = %q", clean("a b\x00é"))
	}
}
