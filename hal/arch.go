package hal

import "simpler/hal/dtype"

// A2A3 is the Atlas A2/A3 architecture: the common element types and a
// system DMA engine.
var A2A3 = &Arch{
	Name:         "a2a3",
	MaxChips:     16,
	DeviceMemory: 64 << 30,
	DTypes:       dtype.Common,
	SDMA:         true,
}

// A5 is the Ascend 950 (a5) architecture: the common types plus FP8/FP4, and
// no system DMA engine.
var A5 = &Arch{
	Name:         "a5",
	MaxChips:     16,
	DeviceMemory: 128 << 30,
	DTypes:       dtype.All,
	SDMA:         false,
}

// SDMA reports whether p can actually drive a system DMA engine. It is an
// architecture fact, but the simulated platforms model no SDMA engine, so
// only onboard platforms of an SDMA architecture qualify; the engine uses
// this to refuse enable_sdma on simulators.
func SDMA(p Platform) bool {
	return !p.Simulated() && p.Arch().SDMA
}
