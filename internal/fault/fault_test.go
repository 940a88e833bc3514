package fault

import (
	"strings"
	"testing"
)

func TestPointsFireOnce(t *testing.T) {
	t.Cleanup(func() { Load("") })
	if err := Load("domain.alloc, global.import@1"); err != nil {
		t.Fatal(err)
	}
	if err := Hit("domain.alloc", -1); err == nil || !strings.Contains(err.Error(), "injected fault at domain.alloc") {
		t.Fatalf("first hit: %v", err)
	}
	if err := Hit("domain.alloc", -1); err != nil {
		t.Fatalf("second hit fired again: %v", err)
	}
	if err := Hit("global.import", 0); err != nil {
		t.Fatalf("node 0 fired a point armed for node 1: %v", err)
	}
	if err := Hit("global.import", 1); err == nil {
		t.Fatal("node 1 did not fire")
	}
}

func TestUnknownPointIsRefused(t *testing.T) {
	t.Cleanup(func() { Load("") })
	for _, spec := range []string{"domain.allocate", "global.import@x"} {
		if err := Load(spec); err == nil || !strings.HasPrefix(err.Error(), "ValueError: ") {
			t.Errorf("Load(%q) = %v", spec, err)
		}
	}
}

func TestInheritedKeepsAllButGlobalPoints(t *testing.T) {
	for spec, want := range map[string]string{
		"global.import@1,domain.alloc, global.prepare,remote.free@2": "domain.alloc,remote.free@2",
		"global.abort":   "",
		"":               "",
		"domain.release": "domain.release",
	} {
		if got := Inherited(spec); got != want {
			t.Errorf("Inherited(%q) = %q, want %q", spec, got, want)
		}
	}
}
