package hal

import "simpler/kind"

// simPlatform runs chips in this process: device memory is Go memory and
// kernels run on the host. One implementation serves both architectures.
type simPlatform struct {
	name   string
	arch   *Arch
	shared sharedSpace // every chip's windows (simshared.go)
}

func init() {
	Register(&simPlatform{name: "a2a3sim", arch: A2A3})
	Register(&simPlatform{name: "a5sim", arch: A5})
}

func (p *simPlatform) Name() string    { return p.name }
func (p *simPlatform) Arch() *Arch     { return p.arch }
func (p *simPlatform) Simulated() bool { return true }

// CommProfiles: the simulator models one fabric, hal/comm's windows.
func (p *simPlatform) CommProfiles() []string { return []string{SimProfile} }

// Serves accepts the sim profile (or "", its default) and nothing else.
func (p *simPlatform) Serves(profile string) error {
	if profile == "" || profile == SimProfile {
		return nil
	}
	return kind.Errorf(kind.ValueError, "comm_profile %q is not supported on %s (supported: %s)", profile, p.name, quotedList(p.CommProfiles()))
}

// Check is always nil: the simulator needs nothing from the machine.
func (p *simPlatform) Check() error { return nil }

func (p *simPlatform) OpenChip(id int) (Chip, error) {
	if id < 0 || id >= p.arch.MaxChips {
		return nil, kind.Errorf(kind.ValueError, "device id %d out of range for %s (0..%d)", id, p.name, p.arch.MaxChips-1)
	}
	return newSimChip(p, id), nil
}
