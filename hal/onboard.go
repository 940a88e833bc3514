package hal

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"simpler/kind"
)

// onboardPlatform is a real device platform. This build carries no onboard
// backend, so it can only diagnose: Check says what is missing on this
// machine, or that the runtime is there but this binary cannot use it.
type onboardPlatform struct {
	name     string
	arch     *Arch
	profiles []string
}

func init() {
	Register(&onboardPlatform{name: "a2a3", arch: A2A3, profiles: []string{"a3-fabric-v1"}})
	Register(&onboardPlatform{name: "a5", arch: A5, profiles: []string{"a5-fabric-v1"}})
}

// runtimeDirs lists, in search order, where the CANN runtime library and
// the driver library may live. Tests replace it with temporary directories.
var runtimeDirs = func() (cann, driver []string) {
	for _, env := range []string{"ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"} {
		if d := os.Getenv(env); d != "" {
			cann = append(cann, filepath.Join(d, "lib64"))
		}
	}
	cann = append(cann, "/usr/local/Ascend/ascend-toolkit/latest/lib64")
	driver = []string{"/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/lib64/driver"}
	return cann, driver
}

const (
	cannLib   = "libascendcl.so"
	driverLib = "libascend_hal.so"
)

// findLib returns the first directory of dirs holding file lib.
func findLib(lib string, dirs []string) (string, bool) {
	for _, d := range dirs {
		if st, err := os.Stat(filepath.Join(d, lib)); err == nil && !st.IsDir() {
			return d, true
		}
	}
	return "", false
}

func (p *onboardPlatform) Name() string           { return p.name }
func (p *onboardPlatform) Arch() *Arch            { return p.arch }
func (p *onboardPlatform) Simulated() bool        { return false }
func (p *onboardPlatform) CommProfiles() []string { return append([]string(nil), p.profiles...) }

// Serves refuses every profile in this build, saying why: the platform's
// own fabric profiles need a backend this binary does not carry, and the
// sim profile's windows live in host shared memory, which an onboard chip
// cannot map.
func (p *onboardPlatform) Serves(profile string) error {
	if profile == "" {
		profile = SimProfile
	}
	switch {
	case slices.Contains(p.profiles, profile):
		return kind.Errorf(kind.ValueError, "comm_profile %q on %s needs the fabric backend, which this build does not have (it serves %q on the simulated platforms)", profile, p.name, SimProfile)
	case profile == SimProfile:
		return kind.Errorf(kind.ValueError, "comm_profile %q needs a simulated platform, and %s is onboard (use --platform %ssim)", profile, p.name, p.name)
	}
	return kind.Errorf(kind.ValueError, "comm_profile %q is not supported on %s (supported: %s)", profile, p.name, quotedList(p.profiles))
}

func (p *onboardPlatform) Check() error {
	cann, driver := runtimeDirs()
	dir, ok := findLib(cannLib, cann)
	if !ok {
		return kind.Errorf(kind.RuntimeError, "platform %s needs the Ascend CANN runtime: %s not found in %s; install CANN and set ASCEND_HOME_PATH, or use --platform %ssim",
			p.name, cannLib, strings.Join(cann, ", "), p.name)
	}
	if _, ok := findLib(driverLib, driver); !ok {
		return kind.Errorf(kind.RuntimeError, "platform %s needs the Ascend NPU driver: %s not found in %s; install the Ascend driver, or use --platform %ssim",
			p.name, driverLib, strings.Join(driver, ", "), p.name)
	}
	return kind.Errorf(kind.RuntimeError, "platform %s: found the Ascend runtime at %s, but this simpler binary was built without onboard support (it cannot launch Starlark kernels on a real device); use --platform %ssim",
		p.name, dir, p.name)
}

// OpenChip fails with Check's diagnosis; in this build Check never passes.
func (p *onboardPlatform) OpenChip(id int) (Chip, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	return nil, kind.Errorf(kind.RuntimeError, "platform %s has no onboard backend", p.name)
}
