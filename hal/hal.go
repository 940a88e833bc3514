// Package hal is simpler's hardware layer: one Platform interface over the
// simulated platforms (a2a3sim, a5sim) and the onboard ones (a2a3, a5).
//
// A Platform opens Chips. A Chip owns device memory in its own address
// space: device pointers are plain integers that only that chip resolves.
// Memory comes from Malloc (freed by Free) or from windows mapped with
// MapWindow (unmapped by UnmapWindow, never by Free). Copies between host
// bytes and device memory are bounds-checked against one live region.
//
// Nothing here knows about Starlark or the task graph.
package hal

import (
	"sort"
	"strconv"
	"strings"

	"simpler/hal/dtype"
	"simpler/kind"
)

// Arch describes one chip architecture.
type Arch struct {
	Name         string        // "a2a3" or "a5"
	MaxChips     int           // chips per node; device ids are 0..MaxChips-1
	DeviceMemory int64         // bytes of device memory per chip
	DTypes       []dtype.DType // element types the chip computes on
	SDMA         bool          // system DMA engine available
}

// Supports reports whether d is one of the architecture's data types.
func (a *Arch) Supports(d dtype.DType) bool {
	for _, x := range a.DTypes {
		if x == d {
			return true
		}
	}
	return false
}

// Platform is a way of running chips: simulated on the host or onboard.
type Platform interface {
	Name() string
	Arch() *Arch
	Simulated() bool
	// CommProfiles lists the communication profiles the platform knows,
	// the default first, for display. Whether one can be used is Serves'
	// to say: a listed profile may still lack its backend in this build.
	CommProfiles() []string
	// Serves reports why the platform cannot serve communication profile
	// profile in this build ("" means SimProfile), or nil. It is the one
	// policy for (platform, comm profile) pairs: every check, wherever a
	// profile is given or re-checked, asks it and adds its own context.
	// The error is a ValueError that names the profile and the platform.
	Serves(profile string) error
	// Check reports why the platform cannot be used on this machine (the
	// vendor runtime is missing, say), or nil.
	Check() error
	// OpenChip opens device id for one Worker.
	OpenChip(id int) (Chip, error)
}

// Chip is one device: its memory and its kernel launch.
type Chip interface {
	DeviceID() int
	Platform() Platform
	// Malloc reserves size bytes of zeroed device memory.
	Malloc(size int) (uint64, error)
	// Free releases an allocation by its start address. Interior, unknown,
	// already freed and window addresses are refused.
	Free(ptr uint64) error
	// CopyIn copies src into device memory at dst.
	CopyIn(dst uint64, src []byte) error
	// CopyOut copies device memory at src into dst.
	CopyOut(dst []byte, src uint64) error
	// Bytes returns the device memory [ptr, ptr+size) for a kernel to read
	// and write in place. It fails unless the range lies in one live region.
	Bytes(ptr uint64, size int) ([]byte, error)
	// MapWindow places mem (memory shared with peers, such as a
	// communication window) in the chip's address space and returns its
	// device address.
	MapWindow(mem []byte, label string) (uint64, error)
	// UnmapWindow removes a window mapped by MapWindow.
	UnmapWindow(ptr uint64) error
	// Live reports the number of live allocations and windows.
	Live() (allocs, windows int)
	// Close frees everything the chip still holds.
	Close() error
}

// SimProfile is the communication profile of the simulated platforms:
// hal/comm's windows in shared memory. It is the default ("" means it) and,
// in this build, the only profile any platform serves.
const SimProfile = "sim"

var platforms = map[string]Platform{}
var aliases = map[string]string{"sim": "a2a3sim"}

// Register adds a platform; called from init functions.
func Register(p Platform) { platforms[p.Name()] = p }

// Lookup returns the platform named name (aliases such as "sim" resolve).
func Lookup(name string) (Platform, error) {
	if a, ok := aliases[name]; ok {
		name = a
	}
	p, ok := platforms[name]
	if !ok {
		return nil, kind.Errorf(kind.ValueError, "unknown platform %q (want one of %s)", name, strings.Join(Names(), ", "))
	}
	return p, nil
}

// Names lists the registered platforms in sorted order.
func Names() []string {
	var n []string
	for k := range platforms {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// quotedList formats names the way scripts write a list of strings:
// ["a", "b"].
func quotedList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
