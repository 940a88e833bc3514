package engine

// Global-domain specs: what allocate_global_domain checks before any
// node command — members, profiles, hosts, device ranks and topology.

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"simpler/hal"
	"simpler/wire"
)

// validateGlobal checks a spec at the broker before anything is sent.
func (w *Worker) validateGlobal(spec *GlobalSpec) ([]int, error) {
	const op = "allocate_global_domain"
	if spec.Name == "" {
		return nil, Errorf(ValueError, "%s: name must not be empty", op)
	}
	if n := len(spec.Members); n == 0 || n > MaxGlobalMembers {
		return nil, Errorf(ValueError, "%s: %d members; a global domain has 1..%d", op, n, MaxGlobalMembers)
	}
	seen := map[[2]int]bool{}
	first, profile := -1, "" // the first member's node and its profile, the domain's
	for _, m := range spec.Members {
		node, local := m[0], m[1]
		if seen[m] {
			return nil, Errorf(ValueError, "%s: member (%d, %d) listed twice", op, node, local)
		}
		seen[m] = true
		if node < 0 || node >= len(w.children) {
			return nil, Errorf(ValueError, "%s: node %d is not a level-3 node of this worker (0..%d)", op, node, len(w.children)-1)
		}
		if err := w.canHostRanks(op, node); err != nil {
			return nil, err
		}
		ns := w.nodeSpec(node)
		if local < 0 || local >= len(ns.DeviceIDs) {
			return nil, Errorf(ValueError, "%s: node %d has no local worker %d (0..%d)", op, node, local, len(ns.DeviceIDs)-1)
		}
		if first < 0 {
			first, profile = node, ns.CommProfile
		}
		if ns.CommProfile != profile {
			return nil, Errorf(ValueError, "%s: node %d uses comm profile %q and node %d %q; every node of a domain must use one profile", op, first, profile, node, ns.CommProfile)
		}
		if err := profileServed(op, node, ns.Platform, ns.CommProfile); err != nil {
			return nil, err
		}
	}
	if profile == hal.SimProfile {
		if err := w.sameHost(op, spec.Members); err != nil {
			return nil, err
		}
	}
	if err := checkWindowSize(op, spec.WindowSize, w.cfg.Platform); err != nil {
		return nil, err
	}
	return bufferOffsets(op, spec.Buffers, spec.WindowSize)
}

// profileServed refuses a node whose platform does not serve profile
// (hal.Platform.Serves, the one policy), before any node is sent anything.
func profileServed(op string, node int, platform, profile string) error {
	where := fmt.Sprintf("%s: node %d", op, node)
	p, err := hal.Lookup(platform)
	if err != nil {
		return Wrap(err, where)
	}
	return Wrap(p.Serves(profile), where)
}

// clusterID names this broker's cluster in every topology it sends, so a
// node can tell domains of different brokers apart, and is the parent id a
// remote node's exports are bound to. Drawn once per worker.
func (w *Worker) clusterID() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.cluster == 0 {
		var b [8]byte
		rand.Read(b[:])
		w.cluster = binary.LittleEndian.Uint64(b[:])
	}
	return w.cluster
}

// assignTopology gives each member its global device rank (see
// globalDeviceRanks), refuses two members with the same one (two nodes
// that give the same rank explicitly), and hashes the placement with the
// cluster id.
func (w *Worker) assignTopology(members [][2]int) ([]int, string, error) {
	byNode := w.globalDeviceRanks()
	ranks := make([]int, len(members))
	owner := map[int]int{}
	var e wire.Encoder
	e.String(hal.SimProfile) // the only profile any platform serves in this build (profileServed)
	e.U64(w.clusterID())
	e.U32(uint32(len(members)))
	for r, m := range members {
		ranks[r] = byNode[m[0]][m[1]]
		if first, dup := owner[ranks[r]]; dup {
			f := members[first]
			return nil, "", Errorf(ValueError, "allocate_global_domain: members (%d, %d) and (%d, %d) both have global device rank %d (check global_device_ranks)", f[0], f[1], m[0], m[1], ranks[r])
		}
		owner[ranks[r]] = r
		e.U32(uint32(m[0]))
		e.U32(uint32(m[1]))
		e.U32(uint32(ranks[r]))
	}
	sum := sha256.Sum256(e.Bytes())
	return ranks, "sha256:" + hex.EncodeToString(sum[:]), nil
}

// globalDeviceRanks is the global device rank of every chip of every
// node, by node and local worker. A node that gives global_device_ranks
// keeps them; the chips of the others are numbered in node order with the
// smallest ranks no explicit one takes (explicit [1] on node 0 and a
// two-chip node 1 give node 1 [0, 2]). The placement is the cluster's, so
// a chip's rank does not depend on which domain it is a member of; only
// two explicit ranks can coincide, which assignTopology refuses for the
// members of a domain.
func (w *Worker) globalDeviceRanks() [][]int {
	byNode := make([][]int, len(w.children))
	taken := map[int]bool{}
	for node := range w.children {
		byNode[node] = w.nodeSpec(node).GlobalDeviceRanks
		for _, r := range byNode[node] {
			taken[r] = true
		}
	}
	next := 0 // the next rank to try for an implicit chip
	for node := range w.children {
		if len(byNode[node]) != 0 {
			continue
		}
		byNode[node] = make([]int, len(w.nodeSpec(node).DeviceIDs))
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

// nodeSpec is what the broker knows of node, in the form a remote node is
// described in: platform, chips, comm profile, global device ranks. (A
// level-4 or deeper child has no chips.)
func (w *Worker) nodeSpec(node int) RemoteSpec {
	if w.IsRemote(node) {
		return *w.remoteSpecs[node]
	}
	c := w.children[node].cfg
	profile := c.CommProfile
	if profile == "" {
		profile = hal.SimProfile
	}
	return RemoteSpec{Platform: c.Platform.Name(), DeviceIDs: c.DeviceIDs, CommProfile: profile, GlobalDeviceRanks: c.GlobalDeviceRanks}
}

// canHostRanks refuses a local child that cannot host global ranks: one
// that is not a level-3 node. (A node whose chips are processes hosts
// them in those processes: gnode.go.)
func (w *Worker) canHostRanks(op string, node int) error {
	if w.IsRemote(node) {
		return nil
	}
	if c := w.children[node].cfg; c.Level != 3 {
		return Errorf(ValueError, "%s: node %d is a level-%d worker; a global domain's members are chips of level-3 nodes", op, node, c.Level)
	}
	return nil
}
