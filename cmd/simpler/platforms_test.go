package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"simpler/hal"
)

// TestPlatformsJSON: `simpler platforms --json`, run as a process, prints
// one JSON array with every platform the text form lists and the same
// facts; an argument is still a usage error.
func TestPlatformsJSON(t *testing.T) {
	env := cliEnv()
	cmd := exec.Command(os.Args[0], "platforms", "--json")
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("simpler platforms --json: %v", err)
	}
	checkNoShm(t, env)
	var got []platformJSON
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("not a JSON array of platforms: %v\n%s", err, out)
	}
	_, text, _ := runCLI(t, "platforms")
	if len(got) != len(hal.Names()) {
		t.Errorf("%d platforms, want %d", len(got), len(hal.Names()))
	}
	for _, p := range got {
		kind := "onboard"
		if p.Simulated {
			kind = "simulated"
		}
		for _, want := range []string{
			fmt.Sprintf("%s (%s, %s architecture)\n", p.Name, kind, p.Architecture),
			fmt.Sprintf("  max chips:     %d\n", p.MaxChips),
			fmt.Sprintf("  device memory: %d GiB\n", p.DeviceMemory>>30),
			"  data types:    " + strings.Join(p.DataTypes, ", ") + "\n",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: the text form lacks %q", p.Name, want)
			}
		}
		if p.Available == (p.UnavailableReason != "") {
			t.Errorf("%s: available %v with reason %q", p.Name, p.Available, p.UnavailableReason)
		}
		if p.Name == "a2a3sim" && (!p.Simulated || !p.Available || p.MaxChips < 2 || len(p.CommProfiles) == 0) {
			t.Errorf("a2a3sim: %+v", p)
		}
	}
	code, out2, errs := runCLI(t, "platforms", "--json", "x")
	if code != 2 || out2 != "" || !strings.Contains(errs, "takes no arguments") {
		t.Errorf("platforms --json x: exit %d %q %q", code, out2, errs)
	}
}
