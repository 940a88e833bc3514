package main

import (
	"encoding/json"
	"flag"
	"io"

	"simpler/hal"
)

// platformsOptions are the flags of `simpler platforms`.
type platformsOptions struct {
	json bool
}

func (o *platformsOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.json, "json", false, "print the platforms as one JSON array, for scripts and CI")
}

// cmdPlatformsFlags parses the flags of `simpler platforms`, then prints
// each platform as text (cmdPlatforms) or, with --json, as JSON.
func cmdPlatformsFlags(args []string, stdout, stderr io.Writer) int {
	fs := flagSet("platforms")
	opts := &platformsOptions{}
	opts.register(fs)
	if code, ok := parseFlags("platforms", fs, args, nil, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "platforms", "takes no arguments, got %q", fs.Args())
	}
	if !opts.json {
		return cmdPlatforms(stdout)
	}
	out, err := json.MarshalIndent(platformsJSON(), "", "  ")
	if err != nil { // strings, numbers and booleans always marshal
		panic(err)
	}
	stdout.Write(append(out, '\n'))
	return 0
}

// platformJSON is one platform in `simpler platforms --json`: the facts
// the text form prints, with the memory in bytes and the status split
// into a boolean and its reason.
type platformJSON struct {
	Name              string   `json:"name"`
	Simulated         bool     `json:"simulated"`
	Architecture      string   `json:"architecture"`
	MaxChips          int      `json:"max_chips"`
	DeviceMemory      int64    `json:"device_memory_bytes"`
	CommProfiles      []string `json:"comm_profiles"`
	SDMA              bool     `json:"sdma"`
	DataTypes         []string `json:"data_types"`
	Available         bool     `json:"available"`
	UnavailableReason string   `json:"unavailable_reason,omitempty"`
}

func platformsJSON() []platformJSON {
	var all []platformJSON
	for _, name := range hal.Names() {
		p, _ := hal.Lookup(name)
		a := p.Arch()
		pj := platformJSON{
			Name:         name,
			Simulated:    p.Simulated(),
			Architecture: a.Name,
			MaxChips:     a.MaxChips,
			DeviceMemory: a.DeviceMemory,
			CommProfiles: append([]string{}, p.CommProfiles()...),
			SDMA:         hal.SDMA(p),
			DataTypes:    []string{},
			Available:    true,
		}
		for _, d := range a.DTypes {
			pj.DataTypes = append(pj.DataTypes, d.String())
		}
		if err := p.Check(); err != nil {
			pj.Available, pj.UnavailableReason = false, err.Error()
		}
		all = append(all, pj)
	}
	return all
}
