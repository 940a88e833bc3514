package global

// Global-domain specs: what allocate_global_domain checks before any
// node command — members, profiles, hosts, device ranks and topology.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"simpler/engine"
	"simpler/hal"
	"simpler/internal/hostid"
	"simpler/wire"
)

// validate checks a spec at broker w before anything is sent, and returns
// where each buffer starts in the window.
func validate(w *engine.Worker, spec *Spec) ([]int, error) {
	const op = "allocate_global_domain"
	if spec.Name == "" {
		return nil, engine.Errorf(engine.ValueError, "%s: name must not be empty", op)
	}
	if n := len(spec.Members); n == 0 || n > MaxMembers {
		return nil, engine.Errorf(engine.ValueError, "%s: %d members; a global domain has 1..%d", op, n, MaxMembers)
	}
	profile, err := checkMembers(w, op, spec.Members)
	if err != nil {
		return nil, err
	}
	if profile == hal.SimProfile {
		if err := sameHost(w, op, spec.Members); err != nil {
			return nil, err
		}
	}
	if err := engine.CheckWindowSize(op, spec.WindowSize, w.Config().Platform); err != nil {
		return nil, err
	}
	return engine.BufferOffsets(op, spec.Buffers, spec.WindowSize)
}

// checkMembers refuses a member listed twice, one that is not a chip of a
// level-3 node of w, and nodes of different comm profiles or of one their
// platform does not serve; it returns the domain's profile.
func checkMembers(w *engine.Worker, op string, members [][2]int) (string, error) {
	seen := map[[2]int]bool{}
	first, profile := -1, "" // the first member's node and its profile, the domain's
	for _, m := range members {
		node, local := m[0], m[1]
		if seen[m] {
			return "", engine.Errorf(engine.ValueError, "%s: member (%d, %d) listed twice", op, node, local)
		}
		seen[m] = true
		if node < 0 || node >= w.NextCount() {
			return "", engine.Errorf(engine.ValueError, "%s: node %d is not a level-3 node of this worker (0..%d)", op, node, w.NextCount()-1)
		}
		if err := canHostRanks(w, op, node); err != nil {
			return "", err
		}
		ns := nodeSpecOf(w, node)
		if local < 0 || local >= len(ns.DeviceIDs) {
			return "", engine.Errorf(engine.ValueError, "%s: node %d has no local worker %d (0..%d)", op, node, local, len(ns.DeviceIDs)-1)
		}
		if first < 0 {
			first, profile = node, ns.CommProfile
		}
		if ns.CommProfile != profile {
			return "", engine.Errorf(engine.ValueError, "%s: node %d uses comm profile %q and node %d %q; every node of a domain must use one profile", op, first, profile, node, ns.CommProfile)
		}
		if err := profileServed(op, node, ns.Platform, ns.CommProfile); err != nil {
			return "", err
		}
	}
	return profile, nil
}

// profileServed refuses a node whose platform does not serve profile
// (hal.Platform.Serves, the one policy), before any node is sent anything.
func profileServed(op string, node int, platform, profile string) error {
	where := fmt.Sprintf("%s: node %d", op, node)
	p, err := hal.Lookup(platform)
	if err != nil {
		return engine.Wrap(err, where)
	}
	return engine.Wrap(p.Serves(profile), where)
}

// sameHost refuses a sim-profile global domain whose members' nodes live
// on different hosts, before any node is sent anything: sim windows are
// one host's shared memory, which a node elsewhere cannot map (it would
// fail inside IMPORT).
func sameHost(w *engine.Worker, op string, members [][2]int) error {
	var hosts []hostid.ID
	nodes := map[[32]byte][]string{} // each host's nodes, in first-member order
	seen := map[int]bool{}
	for _, m := range members {
		if seen[m[0]] {
			continue
		}
		seen[m[0]] = true
		h := w.Nodes().Host(m[0])
		if _, known := nodes[h.Key]; !known {
			hosts = append(hosts, h)
		}
		nodes[h.Key] = append(nodes[h.Key], strconv.Itoa(m[0]))
	}
	if len(hosts) < 2 {
		return nil
	}
	names := hostid.Names(hosts)
	parts := make([]string, len(hosts))
	for i, h := range hosts {
		which := "node"
		if len(nodes[h.Key]) > 1 {
			which = "nodes"
		}
		parts[i] = fmt.Sprintf("%s (%s %s)", names[i], which, strings.Join(nodes[h.Key], ", "))
	}
	return engine.Errorf(engine.ValueError, "%s: comm profile %q keeps a domain's windows in one host's shared memory, and its members live on hosts %s; give it members of one host",
		op, hal.SimProfile, strings.Join(parts, " and "))
}

// assignTopology gives each member its global device rank (see
// deviceRanks), refuses two members with the same one (two nodes that
// give the same rank explicitly), and hashes the placement with the
// broker's cluster id.
func assignTopology(w *engine.Worker, members [][2]int) ([]int, string, error) {
	byNode := deviceRanks(w)
	ranks := make([]int, len(members))
	owner := map[int]int{}
	var e wire.Encoder
	e.String(hal.SimProfile) // the only profile any platform serves in this build (profileServed)
	e.U64(w.ClusterID())
	e.U32(uint32(len(members)))
	for r, m := range members {
		ranks[r] = byNode[m[0]][m[1]]
		if first, dup := owner[ranks[r]]; dup {
			f := members[first]
			return nil, "", engine.Errorf(engine.ValueError, "allocate_global_domain: members (%d, %d) and (%d, %d) both have global device rank %d (check global_device_ranks)", f[0], f[1], m[0], m[1], ranks[r])
		}
		owner[ranks[r]] = r
		e.U32(uint32(m[0]))
		e.U32(uint32(m[1]))
		e.U32(uint32(ranks[r]))
	}
	sum := sha256.Sum256(e.Bytes())
	return ranks, "sha256:" + hex.EncodeToString(sum[:]), nil
}

// deviceRanks is the global device rank of every chip of every node of
// broker w, by node and local worker. A node that gives
// global_device_ranks keeps them; the chips of the others are numbered in
// node order with the smallest ranks no explicit one takes (explicit [1]
// on node 0 and a two-chip node 1 give node 1 [0, 2]). The placement is
// the cluster's, so a chip's rank does not depend on which domain it is a
// member of; only two explicit ranks can coincide, which assignTopology
// refuses for the members of a domain.
func deviceRanks(w *engine.Worker) [][]int {
	nodes := w.NextCount()
	byNode := make([][]int, nodes)
	taken := map[int]bool{}
	for node := range nodes {
		byNode[node] = nodeSpecOf(w, node).GlobalDeviceRanks
		for _, r := range byNode[node] {
			taken[r] = true
		}
	}
	next := 0 // the next rank to try for an implicit chip
	for node := range nodes {
		if len(byNode[node]) != 0 {
			continue
		}
		byNode[node] = make([]int, len(nodeSpecOf(w, node).DeviceIDs))
		for local := range byNode[node] {
			for taken[next] {
				next++
			}
			byNode[node][local] = next
			next++
		}
	}
	return byNode
}

// nodeSpecOf is what broker w knows of its node: engine.Nodes.Spec,
// which a test replaces to show the broker a node no Config can make.
var nodeSpecOf = func(w *engine.Worker, node int) engine.RemoteSpec { return w.Nodes().Spec(node) }

// canHostRanks refuses a local child that cannot host global ranks: one
// that is not a level-3 node. (A node whose chips are processes hosts
// them in those processes: node.go.)
func canHostRanks(w *engine.Worker, op string, node int) error {
	if w.Nodes().IsRemote(node) {
		return nil
	}
	if level := w.Children()[node].Level(); level != 3 {
		return engine.Errorf(engine.ValueError, "%s: node %d is a level-%d worker; a global domain's members are chips of level-3 nodes", op, node, level)
	}
	return nil
}
