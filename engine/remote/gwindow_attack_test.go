package remote

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"simpler/engine"
	"simpler/engine/global"
	"simpler/hal/comm"
	"simpler/hal/shm"
	"simpler/internal/enginetest"
	"simpler/wire"
)

// A global domain's windows against a second parent with the token: the
// names /dev/shm lists are locators, not capabilities (issue 22, hole 1).

// shmNames is what any local user sees in /dev/shm: our objects' names.
func shmNames(t *testing.T) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir("/dev/shm")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "simpler-") {
			names[e.Name()] = true
		}
	}
	return names
}

// ofSessions reports whether name is under the prefix of one of d's
// sessions.
func ofSessions(d *Daemon, name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.sessions {
		if strings.HasPrefix(name, s.prefix) {
			return true
		}
	}
	return false
}

// headerWindow is the rank-0 window name whose header is hdr: where a
// table must name rank 0 for an importer to open hdr as the header.
func headerWindow(hdr string) string {
	base := strings.TrimSuffix(hdr, "-hdr")
	if comm.PooledName(base) {
		return base
	}
	return base + "-r0"
}

// substitute rewrites node 0's command cmd (IMPORT_TABLE or REATTACH) of
// the attacker's domain so that rank's descriptor names name: rank 2's is
// a peer window node 0 opens, rank 1's is node 0's own window (REATTACH
// takes it back from the pool by name), and through rank 0's the node
// opens the header (a header's name goes there as the rank-0 window it is
// derived from). The descriptor keeps the attacker's own secret, the only
// one it has.
func substitute(t *testing.T, cmd wire.Command, name string, rank int) func(c *wire.Control) *wire.Control {
	return func(c *wire.Control) *wire.Control {
		if c.Cmd != cmd {
			return nil
		}
		var table wire.DescriptorTable
		var re wire.Reattach
		var err error
		if cmd == wire.CmdReattach {
			re, err = wire.DecodeReattach(c.Domain.Table)
			table = re.Descriptors
		} else {
			table, err = wire.DecodeDescriptorTable(c.Domain.Table)
		}
		ds, derr := engine.CommDescriptors(table)
		if err != nil || derr != nil || len(ds) != 3 {
			t.Errorf("the attacker's own %v table: %v, %v, %d descriptors", cmd, err, derr, len(ds))
			return nil
		}
		if rank == 0 {
			ds[0].Handle = headerWindow(name)
		} else {
			ds[rank].Handle = name
		}
		bad := *c
		if cmd == wire.CmdReattach {
			re.Descriptors = engine.WireDescriptors(ds)
			bad.Domain.Table = wire.Payload(&re)
		} else {
			table = engine.WireDescriptors(ds)
			bad.Domain.Table = wire.Payload(&table)
		}
		return &bad
	}
}

// wantWindowRefused checks a node's answer to a table whose rank's
// descriptor named name: a refusal, and for a name that still exists, the
// one that says why (a name that a concurrent process removed meanwhile
// is refused for not existing).
func wantWindowRefused(t *testing.T, cmd wire.Command, name string, rank int, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%v naming %s as rank %d's: accepted", cmd, name, rank)
		return
	}
	if _, serr := os.Stat("/dev/shm/" + name); serr != nil {
		return
	}
	k, want := engine.ValueError, ""
	switch {
	case rank == 1 && cmd == wire.CmdImportTable && name == shm.LockName(strings.TrimSuffix(name, "live")):
		want = "is not the name of rank 1's window" // a process's liveness lock: not a window's form
	case rank == 0:
		want = "rank 0's header (" + name + ") is not the one its descriptor names"
	case rank == 1 && cmd == wire.CmdImportTable: // node 0's own: exactly as it prepared it
		want = "descriptor 1 of the table is"
	case rank == 1 && comm.PooledName(name): // taken back only from node 0's own pool
		k, want = engine.KeyError, "the pooled window "+name+" is not idle in this process"
	case rank == 1:
		want = "must name a pooled window"
	case comm.PooledName(name):
		want = "the window of rank 2 (" + name + ") is not the one its descriptor names"
	default: // not a window's name: the table's check refuses its form
		want = "is not the name of rank 2's window"
	}
	if engine.KindOf(err) != k || !strings.Contains(err.Error(), want) {
		t.Errorf("%v naming %s as rank %d's: %v\n  want a %v saying %q", cmd, name, rank, err, k, want)
	}
}

// places are where a listed name goes in the attacker's table: a
// header's as rank 0's (its header), any other as rank 1's (node 0's own)
// and rank 2's (a peer's).
func places(name string) []int {
	if strings.HasSuffix(name, "-hdr") {
		return []int{0}
	}
	return []int{1, 2}
}

// While a victim's global domain is live, a second parent with the token
// lists /dev/shm and sends every name that appeared with the victim's
// domain in its own domain's IMPORT_TABLE and in its REATTACH, as a
// window and as rank 0's header. Each is refused by the session that
// would open it (it cannot match the victim's secret); the victim's
// window bytes are as it wrote them and its domain keeps working, and
// the attacker's own domain, allocated the honest way, works right after.
func TestAttackGlobalWindowNames(t *testing.T) {
	daemon, a := startDaemon(t)
	victim := remoteWorker(t, a, a)
	attacker := remoteWorker(t, a, a)
	a0 := nodeOf(attacker, 0)
	vspec := global.Spec{Name: "victim", Members: [][2]int{{0, 0}, {1, 0}}, WindowSize: 4096}
	// Node 0 hosts rank 1: it opens rank 0's header and rank 0's and 2's
	// windows from the table.
	aspec := global.Spec{Name: "attacker", Members: [][2]int{{1, 0}, {0, 0}, {1, 1}}, WindowSize: 4096}
	secrets := [][]byte{[]byte("the victim's rank 0 secret"), []byte("the victim's rank 1 secret")}

	// allocate runs one attacker domain; whatever comes up is its own, so
	// its rank 0 and rank 2 windows read zeroes.
	allocate := func() error {
		return submitRun(t, attacker, func(o *engine.Orchestrator) error {
			d, err := global.Allocate(o, aspec)
			if err != nil {
				return err
			}
			for _, r := range []int{0, 2} {
				got, err := d.CopyFromGlobal(r, 64, "", 0)
				if err != nil {
					return err
				}
				if !bytes.Equal(got, make([]byte, 64)) {
					t.Errorf("the attacker's rank %d window reads %q", r, got)
				}
			}
			return d.CopyToGlobal(2, []byte("the attacker's own"), "", 0)
		})
	}
	attack := func(cmd wire.Command, name string, rank int) (allocErr, nodeErr error) {
		a0.setTamper(substitute(t, cmd, name, rank))
		allocErr = allocate()
		answers := a0.setTamper(nil)
		if len(answers) != 1 {
			t.Fatalf("%v naming %s: %d commands rewritten, want 1 (allocation: %v)", cmd, name, len(answers), allocErr)
		}
		return allocErr, answers[0]
	}

	before := shmNames(t)
	mustRun(t, victim, buildErr(func(o *engine.Orchestrator) {
		d := enginetest.Must(global.Allocate(o, vspec))
		for r, s := range secrets {
			enginetest.Must(0, d.CopyToGlobal(r, s, "", 0))
		}
		var names []string
		windows, headers := 0, 0
		for n := range shmNames(t) {
			// Only this daemon's sessions' names: tests of other packages
			// make objects in /dev/shm meanwhile.
			if before[n] || !ofSessions(daemon, n) || len(n) > comm.DescriptorHandleMax || len(headerWindow(n)) > comm.DescriptorHandleMax {
				continue
			}
			names = append(names, n)
			switch {
			case comm.PooledName(n):
				windows++
			case strings.HasSuffix(n, "-hdr"):
				headers++
			}
		}
		slices.Sort(names)
		t.Logf("names listed with the victim's domain: %v", names)
		if windows < 2 || headers < 1 {
			t.Fatalf("the victim's domain listed %v: want its two windows and its header", names)
		}

		for _, name := range names {
			for _, rank := range places(name) {
				allocErr, nodeErr := attack(wire.CmdImportTable, name, rank)
				wantWindowRefused(t, wire.CmdImportTable, name, rank, nodeErr)
				if allocErr == nil {
					t.Errorf("IMPORT_TABLE naming %s as rank %d's: the attacker's domain came up", name, rank)
				}
			}
		}
		// The attacker's own domain, the honest way: its windows are
		// remembered, so the next allocations send REATTACH.
		if err := allocate(); err != nil {
			t.Fatalf("the attacker's own domain: %v", err)
		}
		for _, name := range names {
			for _, rank := range places(name) {
				allocErr, nodeErr := attack(wire.CmdReattach, name, rank)
				wantWindowRefused(t, wire.CmdReattach, name, rank, nodeErr)
				if allocErr != nil { // the broker falls back to the full transaction, untampered
					t.Errorf("REATTACH naming %s as rank %d's: the fallback failed: %v", name, rank, allocErr)
				}
			}
		}

		// Nothing of the victim's was changed, and its domain still works.
		for r, s := range secrets {
			if got := enginetest.Must(d.CopyFromGlobal(r, len(s), "", 0)); !bytes.Equal(got, s) {
				t.Errorf("the victim's rank %d window reads %q, wrote %q", r, got, s)
			}
		}
		enginetest.Must(0, d.CopyToGlobal(1, []byte("still the victim's"), "", 0))
		if got := enginetest.Must(d.CopyFromGlobal(1, 18, "", 0)); string(got) != "still the victim's" {
			t.Errorf("the victim's domain after the attacks reads %q", got)
		}
	}))
	// Both parents are served right after: the attacker warm, the victim
	// with a new domain.
	if err := allocate(); err != nil {
		t.Errorf("the attacker's own domain after the attacks: %v", err)
	}
	mustRun(t, victim, buildErr(func(o *engine.Orchestrator) {
		d := enginetest.Must(global.Allocate(o, vspec))
		if got := enginetest.Must(d.CopyFromGlobal(0, 8, "", 0)); !bytes.Equal(got, make([]byte, 8)) {
			t.Errorf("the victim's next domain reads %q, want zeroes", got)
		}
	}))
}
