package hal

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"simpler/hal/dtype"
	"simpler/kind"
)

func TestArchTables(t *testing.T) {
	if A2A3.Name != "a2a3" || A2A3.MaxChips != 16 || A2A3.DeviceMemory != 64<<30 || !A2A3.SDMA {
		t.Errorf("A2A3 = %+v", *A2A3)
	}
	if A5.Name != "a5" || A5.MaxChips != 16 || A5.DeviceMemory != 128<<30 || A5.SDMA {
		t.Errorf("A5 = %+v", *A5)
	}
	if A2A3.Supports(dtype.Float8E4M3) || !A5.Supports(dtype.Float8E4M3) || !A5.Supports(dtype.Float4E2M1) {
		t.Error("FP8/FP4 must be a5 only")
	}
	if !A2A3.Supports(dtype.BFloat16) || !A5.Supports(dtype.BFloat16) {
		t.Error("bfloat16 must be common")
	}
}

func TestPlatforms(t *testing.T) {
	if got, want := Names(), []string{"a2a3", "a2a3sim", "a5", "a5sim"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	cases := []struct {
		name     string
		arch     *Arch
		sim      bool
		profiles []string
		sdma     bool
	}{
		{"a2a3sim", A2A3, true, []string{"sim"}, false},
		{"a5sim", A5, true, []string{"sim"}, false},
		{"a2a3", A2A3, false, []string{"a3-fabric-v1"}, true},
		{"a5", A5, false, []string{"a5-fabric-v1"}, false},
	}
	for _, c := range cases {
		p, err := Lookup(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Name() != c.name || p.Arch() != c.arch || p.Simulated() != c.sim ||
			!reflect.DeepEqual(p.CommProfiles(), c.profiles) || SDMA(p) != c.sdma {
			t.Errorf("%s: got name %s arch %s sim %v profiles %v sdma %v", c.name,
				p.Name(), p.Arch().Name, p.Simulated(), p.CommProfiles(), SDMA(p))
		}
	}
	if p, _ := Lookup("sim"); p == nil || p.Name() != "a2a3sim" {
		t.Errorf("alias sim -> %v", p)
	}
	if _, err := Lookup("tpu"); err == nil || !strings.Contains(err.Error(), `unknown platform "tpu"`) {
		t.Errorf("Lookup(tpu) = %v", err)
	}
}

func TestSimOpenChip(t *testing.T) {
	p, _ := Lookup("a2a3sim")
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{-1, 16, 17} {
		_, err := p.OpenChip(id)
		want := "ValueError: device id " + strconv.Itoa(id) + " out of range for a2a3sim (0..15)"
		if err == nil || err.Error() != want {
			t.Errorf("OpenChip(%d) = %v, want %q", id, err, want)
		}
	}
	c, err := p.OpenChip(15)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.DeviceID() != 15 || c.Platform() != p {
		t.Errorf("chip 15 reports id %d platform %s", c.DeviceID(), c.Platform().Name())
	}
}

// withDirs points the onboard probe at temporary directories.
func withDirs(t *testing.T, cann, driver []string) {
	old := runtimeDirs
	runtimeDirs = func() ([]string, []string) { return cann, driver }
	t.Cleanup(func() { runtimeDirs = old })
}

func touch(t *testing.T, path string) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOnboardProbe(t *testing.T) {
	tmp := t.TempDir()
	c1, c2, c3 := filepath.Join(tmp, "home/lib64"), filepath.Join(tmp, "toolkit/lib64"), filepath.Join(tmp, "latest/lib64")
	d1, d2 := filepath.Join(tmp, "driver/lib64"), filepath.Join(tmp, "driver/lib64/driver")
	withDirs(t, []string{c1, c2, c3}, []string{d1, d2})
	a2a3, _ := Lookup("a2a3")
	a5, _ := Lookup("a5")

	// Nothing installed. A directory named like the library does not count.
	if err := os.MkdirAll(filepath.Join(c1, "libascendcl.so"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := "RuntimeError: platform a2a3 needs the Ascend CANN runtime: libascendcl.so not found in " +
		c1 + ", " + c2 + ", " + c3 + "; install CANN and set ASCEND_HOME_PATH, or use --platform a2a3sim"
	if err := a2a3.Check(); err == nil || err.Error() != want {
		t.Errorf("Check() = %v\nwant %s", err, want)
	}
	if _, err := a2a3.OpenChip(0); err == nil || err.Error() != want {
		t.Errorf("OpenChip(0) = %v, want the Check error", err)
	}
	if err := a5.Check(); err == nil || !strings.HasSuffix(err.Error(), "--platform a5sim") {
		t.Errorf("a5 Check() = %v", err)
	}

	// CANN found (the first hit wins), driver missing.
	touch(t, filepath.Join(c2, "libascendcl.so"))
	touch(t, filepath.Join(c3, "libascendcl.so"))
	err := a2a3.Check()
	if err == nil || !strings.Contains(err.Error(), "libascend_hal.so not found in "+d1+", "+d2) {
		t.Errorf("driver missing: Check() = %v", err)
	}

	// Both found: this build still cannot run onboard, and says where it looked.
	touch(t, filepath.Join(d2, "libascend_hal.so"))
	want = "RuntimeError: platform a2a3: found the Ascend runtime at " + c2 +
		", but this simpler binary was built without onboard support (it cannot launch Starlark kernels on a real device); use --platform a2a3sim"
	if err := a2a3.Check(); err == nil || err.Error() != want {
		t.Errorf("Check() = %v\nwant %s", err, want)
	}
	if c, err := a2a3.OpenChip(0); c != nil || err == nil || err.Error() != want {
		t.Errorf("OpenChip(0) = %v, %v", c, err)
	}
}

func TestDefaultRuntimeDirs(t *testing.T) {
	t.Setenv("ASCEND_HOME_PATH", "/opt/cann")
	t.Setenv("ASCEND_TOOLKIT_HOME", "")
	cann, driver := runtimeDirs()
	if want := []string{"/opt/cann/lib64", "/usr/local/Ascend/ascend-toolkit/latest/lib64"}; !reflect.DeepEqual(cann, want) {
		t.Errorf("cann dirs = %v, want %v", cann, want)
	}
	if want := []string{"/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/lib64/driver"}; !reflect.DeepEqual(driver, want) {
		t.Errorf("driver dirs = %v, want %v", driver, want)
	}
}

// Serves is the one policy for (platform, comm profile) pairs: the
// simulated platforms serve "sim" (also as ""); the onboard ones list a
// fabric profile but refuse it here, since this build has no fabric
// backend; every refusal is a ValueError naming the pair.
func TestServes(t *testing.T) {
	cases := []struct{ platform, profile, want string }{
		{"a2a3sim", "", ""},
		{"a2a3sim", "sim", ""},
		{"a5sim", "", ""},
		{"a5sim", "sim", ""},
		{"a2a3sim", "a3-fabric-v1", `ValueError: comm_profile "a3-fabric-v1" is not supported on a2a3sim (supported: ["sim"])`},
		{"a5sim", "infiniband", `ValueError: comm_profile "infiniband" is not supported on a5sim (supported: ["sim"])`},
		{"a2a3sim", "SIM", `ValueError: comm_profile "SIM" is not supported on a2a3sim (supported: ["sim"])`},
		{"a2a3", "a3-fabric-v1", `ValueError: comm_profile "a3-fabric-v1" on a2a3 needs the fabric backend, which this build does not have (it serves "sim" on the simulated platforms)`},
		{"a5", "a5-fabric-v1", `ValueError: comm_profile "a5-fabric-v1" on a5 needs the fabric backend, which this build does not have (it serves "sim" on the simulated platforms)`},
		{"a2a3", "", `ValueError: comm_profile "sim" needs a simulated platform, and a2a3 is onboard (use --platform a2a3sim)`},
		{"a5", "sim", `ValueError: comm_profile "sim" needs a simulated platform, and a5 is onboard (use --platform a5sim)`},
		{"a5", "a3-fabric-v1", `ValueError: comm_profile "a3-fabric-v1" is not supported on a5 (supported: ["a5-fabric-v1"])`},
		{"a2a3", "infiniband", `ValueError: comm_profile "infiniband" is not supported on a2a3 (supported: ["a3-fabric-v1"])`},
	}
	for _, c := range cases {
		p, err := Lookup(c.platform)
		if err != nil {
			t.Fatal(err)
		}
		err = p.Serves(c.profile)
		if c.want == "" && err != nil || c.want != "" && (err == nil || err.Error() != c.want || kind.Of(err) != kind.ValueError) {
			t.Errorf("%s.Serves(%q) = %v\nwant %s", c.platform, c.profile, err, c.want)
		}
	}
	// Every platform serves its default or says why; none serves a
	// profile it does not list (the default aside).
	for _, name := range Names() {
		p, _ := Lookup(name)
		if err := p.Serves("no-such-profile"); err == nil {
			t.Errorf("%s serves a profile it does not list", name)
		}
		if p.Simulated() != (p.Serves("") == nil) {
			t.Errorf("%s: Serves(\"\") = %v for a platform with Simulated() = %v", name, p.Serves(""), p.Simulated())
		}
	}
}
