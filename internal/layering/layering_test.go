package layering

import (
	"os/exec"
	"strings"
	"testing"

	"simpler/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// imports is every package of the module and what it imports directly,
// from go list.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "simpler/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		graph[f[0]] = f[1:]
	}
	return graph
}

func TestLayers(t *testing.T) {
	graph := imports(t)
	if len(graph) < 20 || graph["simpler/engine"] == nil {
		t.Fatalf("go list found %d packages", len(graph))
	}
	forbid := func(pkg string, bad func(imp string) bool, why string) {
		for _, imp := range graph[pkg] {
			if bad(imp) {
				t.Errorf("%s imports %s: %s", pkg, imp, why)
			}
		}
	}
	is := func(names ...string) func(string) bool {
		return func(imp string) bool {
			for _, n := range names {
				if imp == n || strings.HasPrefix(imp, n+"/") {
					return true
				}
			}
			return false
		}
	}
	forbid("simpler/engine", is("simpler/engine/proc", "simpler/engine/remote"), "they implement the engine's interfaces; Config brings them in")
	forbid("simpler/engine", is("simpler/engine/global"), "global domains are a role layered on the engine (its hooks and RegisterControl)")
	forbid("simpler/engine/proc", is("simpler/engine/remote", "simpler/engine/global"), "proc, remote and global never import each other")
	forbid("simpler/engine/remote", is("simpler/engine/proc", "simpler/engine/global"), "proc, remote and global never import each other")
	forbid("simpler/engine/global", is("simpler/engine/proc", "simpler/engine/remote"), "proc, remote and global never import each other")
	forbid("simpler/engine/internal/lifetime", is("simpler/engine", "simpler/hal", "simpler/wire"), "a domain's lifetime is a leaf state machine")
	forbid("simpler/engine/internal/core", func(imp string) bool { return strings.HasPrefix(imp, "simpler/") },
		"the core is pure decision logic: the engine steps it, it knows nothing of the engine")
	for pkg := range graph {
		below := is("simpler/engine", "simpler/hal", "simpler/wire", "simpler/kind", "simpler/internal")(pkg)
		if below && pkg != "simpler/internal/mpitest" {
			forbid(pkg, is("go.starlark.net"), "nothing below starlib knows the interpreter")
		}
	}
	for _, pkg := range []string{"simpler/internal/race", "simpler/internal/dsched", "simpler/internal/halt"} {
		forbid(pkg, is("simpler/engine", "simpler/starlib"), "engine and starlib call it, not the other way")
	}
}
