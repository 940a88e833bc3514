// Package fault injects failures at named points for tests that must drive
// rollback paths through real processes. SIMPLER_INJECT_FAULT holds
// comma-separated points; each fails the first time it is reached. A point
// may name one node as "point@N" (the NEXT_LEVEL worker id of an L3 node as
// seen by L4); a bare point applies to whichever process reaches it.
//
// Never set in normal use.
package fault

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"simpler/kind"
)

// Points lists every known fault point.
var Points = []string{
	"global.comm_init", "global.prepare", "global.import", "global.commit",
	"global.abort", "global.release", "global.reattach", "domain.alloc", "domain.release",
	"remote.import", "remote.free",
}

var (
	mu      sync.Mutex
	armed   map[string]bool // "point" or "point@node" → still armed
	loaded  bool
	loadErr error
)

// Env is the environment variable read by Load.
const Env = "SIMPLER_INJECT_FAULT"

// Load parses spec (the value of SIMPLER_INJECT_FAULT) and arms its points,
// replacing any armed before. An unknown point is an error.
func Load(spec string) error {
	m, err := parse(spec)
	mu.Lock()
	defer mu.Unlock()
	armed, loaded, loadErr = m, true, err
	return err
}

func parse(spec string) (map[string]bool, error) {
	m := map[string]bool{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		point, node, hasNode := strings.Cut(item, "@")
		if !known(point) {
			return nil, kind.Errorf(kind.ValueError, "%s: unknown fault point %q (known: %s)", Env, point, strings.Join(Points, ", "))
		}
		if hasNode {
			if n, err := strconv.Atoi(node); err != nil || n < 0 {
				return nil, kind.Errorf(kind.ValueError, "%s: bad node in %q", Env, item)
			}
		}
		m[item] = true
	}
	return m, nil
}

func known(p string) bool {
	for _, k := range Points {
		if k == p {
			return true
		}
	}
	return false
}

// ensure arms the points of the environment on first use. Caller holds mu.
func ensure() {
	if !loaded {
		loaded = true
		armed, loadErr = parse(os.Getenv(Env))
	}
}

// Hit reports an injected failure the first time point is reached (node <
// 0 means "this process", matching only bare points).
func Hit(point string, node int) error {
	mu.Lock()
	defer mu.Unlock()
	ensure()
	if len(armed) == 0 {
		return nil // the normal case: nothing armed, nothing to format
	}
	keys := []string{point}
	if node >= 0 {
		keys = append(keys, fmt.Sprintf("%s@%d", point, node))
	}
	for _, k := range keys {
		if armed[k] {
			delete(armed, k)
			return kind.Errorf(kind.RuntimeError, "injected fault at %s", k)
		}
	}
	return nil
}

// Inherited is the part of spec a process-mode child of this process keeps:
// every point but the global-domain ones. Those the broker applies itself,
// per node (Hit with the node's id), so a node process that inherited them
// would fire them a second time.
func Inherited(spec string) string {
	var keep []string
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item != "" && !strings.HasPrefix(item, "global.") {
			keep = append(keep, item)
		}
	}
	return strings.Join(keep, ",")
}
