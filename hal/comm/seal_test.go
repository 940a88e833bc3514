package comm

import (
	"encoding/hex"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"simpler/hal"
	"simpler/hal/shm"
	"simpler/kind"
)

// sealVerdict, stepped through every case.
func TestSealVerdict(t *testing.T) {
	want := sealStamp{id: 7, gen: 2, what: sealWindow, rank: 1, ranks: 4, payload: 4096}
	secret := Secret{1, 2, 3}
	other := Secret{1, 2, 4}
	with := func(f func(*sealStamp)) sealStamp { s := want; f(&s); return s }
	earlier := with(func(s *sealStamp) { s.id, s.gen = 6, 1 }) // the warm domain before, same place
	cases := []struct {
		name     string
		got      seal
		ok       bool
		secret   Secret
		verified bool
		reattach bool
		want     verdict
	}{
		{"match", seal{want, secret}, true, secret, false, false, sealMatches},
		{"match, reattaching", seal{want, secret}, true, secret, true, true, sealMatches},
		{"another secret", seal{want, other}, true, secret, true, true, sealRefused},
		{"a zero secret in the descriptor", seal{want, Secret{}}, true, Secret{}, true, true, sealRefused},
		{"idle for this domain (released)", seal{want, Secret{}}, true, secret, true, true, sealRefused},
		{"not whole", seal{}, false, secret, false, false, sealNotYet},
		{"another domain", seal{with(func(s *sealStamp) { s.id++ }), secret}, true, secret, false, false, sealRefused},
		{"another generation", seal{with(func(s *sealStamp) { s.gen++ }), secret}, true, secret, false, false, sealRefused},
		{"another rank", seal{with(func(s *sealStamp) { s.rank = 2 }), secret}, true, secret, false, false, sealRefused},
		{"a header", seal{with(func(s *sealStamp) { s.what = sealHeader }), secret}, true, secret, false, false, sealRefused},
		{"another size", seal{with(func(s *sealStamp) { s.payload = 8192 }), secret}, true, secret, false, false, sealRefused},
		// REATTACH: an idle window of the same place, before its owner reseals.
		{"idle, verified here, reattaching", seal{earlier, Secret{}}, true, secret, true, true, sealKnown},
		{"idle, never verified here", seal{earlier, Secret{}}, true, secret, false, true, sealRefused},
		{"idle, verified, not reattaching", seal{earlier, Secret{}}, true, secret, true, false, sealRefused},
		{"live in another domain", seal{earlier, other}, true, secret, true, true, sealRefused},
		{"idle, another rank's place", seal{with(func(s *sealStamp) { s.id, s.rank = 6, 2 }), Secret{}}, true, secret, true, true, sealRefused},
	}
	for _, c := range cases {
		if got := sealVerdict(c.got, c.ok, want, c.secret, c.verified, c.reattach); got != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, got, c.want)
		}
	}
}

// A seal written is read back whole; an odd sequence (a rewrite under way)
// and a page never sealed read as not whole; idling keeps the stamp and
// zeroes the secret.
func TestSealWords(t *testing.T) {
	b := make([]byte, sealLen)
	if _, ok := readSeal(b); ok {
		t.Fatal("a page never sealed reads as whole")
	}
	s := seal{sealStamp{id: 1, gen: 2, what: sealHeader, rank: 0, ranks: 9, payload: 8192}, NewSecret()}
	writeSeal(b, s)
	if got, ok := readSeal(b); !ok || got != s {
		t.Fatalf("read %v (%v), wrote %v", got, ok, s)
	}
	b[0] |= 1
	if _, ok := readSeal(b); ok {
		t.Fatal("a seal being rewritten reads as whole")
	}
	b[0] &^= 1
	idleSeal(b)
	if got, ok := readSeal(b); !ok || got.stamp != s.stamp || !got.secret.IsZero() {
		t.Fatalf("idle: %v (%v)", got, ok)
	}
}

// wantRefused checks that an import was refused with a ValueError naming
// what, showing none of the secrets, and left the chip and the named
// object's references as they were.
func wantRefused(t *testing.T, what string, err error, chip hal.Chip, before live, name string, refsBefore int, secrets ...Secret) {
	t.Helper()
	if kind.Of(err) != kind.ValueError || !strings.Contains(err.Error(), what) {
		t.Errorf("%v\n  want a ValueError saying %q", err, what)
	}
	for _, s := range secrets {
		if err != nil && strings.Contains(err.Error(), hex.EncodeToString(s[:])) {
			t.Errorf("the error shows a secret: %v", err)
		}
	}
	if got := liveOf(chip); got != before {
		t.Errorf("chip %+v after the refusal, before %+v", got, before)
	}
	if got := refs(name); got != refsBefore {
		t.Errorf("%s has %d references after the refusal, had %d", name, got, refsBefore)
	}
}

// A window is mapped only with its own secret: a wrong one, a zero one,
// another rank's window with that rank's secret, and rank 0's header
// under a wrong secret are all refused, naming the rank, with nothing
// mapped or held; the right table works right after.
func TestGlobalImportChecksSecrets(t *testing.T) {
	clean(t)
	chips := openChips(t, 3)
	req := newGlobalReq(3, 4096)
	req.Pooled = true // pooled names say nothing of their domain: only the seal does
	d := prepareDomain(t, req, chips, 1)
	g := d.ranks[1]
	before := liveOf(chips[1])
	with := func(j int, f func(*Descriptor)) []Descriptor {
		tab := slices.Clone(d.table)
		f(&tab[j])
		return tab
	}
	wrong := NewSecret()
	name2, hdr := d.table[2].Handle, globalHeaderOf(d.table[0].Handle)

	err := g.Import(with(2, func(x *Descriptor) { x.Secret = wrong }))
	wantRefused(t, "the window of rank 2 ("+name2+") is not the one its descriptor names", err, chips[1], before, name2, 1, wrong, d.table[2].Secret)

	err = g.Import(with(2, func(x *Descriptor) { x.Secret = Secret{} }))
	wantRefused(t, "descriptor 2 of the table: it carries no secret", err, chips[1], before, name2, 1)

	// Rank 0's window and secret put in rank 2's place: the seal says rank 0.
	err = g.Import(with(2, func(x *Descriptor) { x.Handle, x.Secret = d.table[0].Handle, d.table[0].Secret }))
	wantRefused(t, "the window of rank 2 ("+d.table[0].Handle+") is not the one", err, chips[1], before, d.table[0].Handle, 1)

	// The header is rank 0's: opened under rank 0's secret only.
	err = g.Import(with(0, func(x *Descriptor) { x.Secret = wrong }))
	wantRefused(t, "rank 0's header ("+hdr+") is not the one its descriptor names", err, chips[1], before, hdr, 1, wrong, d.table[0].Secret)

	assertPrepared(t, g, chips[1])
	d.importAll(t)
	d.commitAll(t)
}

// Another domain's window named in a table, with the importing domain's
// own secret or with the other domain's (which only its members have), is
// refused: the seal binds the window to its domain and generation.
func TestGlobalImportRefusesAnotherDomainsWindow(t *testing.T) {
	clean(t)
	chips := openChips(t, 4)
	vreq := newGlobalReq(2, 4096)
	vreq.Pooled = true
	victim := prepareDomain(t, vreq, chips[:2], 1)
	victim.importAll(t)
	victim.commitAll(t)
	if err := chips[1].CopyIn(victim.ranks[1].WindowBase(), []byte("victim's secret")); err != nil {
		t.Fatal(err)
	}
	areq := newGlobalReq(2, 4096)
	areq.Pooled = true
	attacker := prepareDomain(t, areq, chips[2:], 1)
	g := attacker.ranks[0]
	before := liveOf(chips[2])
	vname := victim.table[1].Handle
	for _, secret := range []Secret{attacker.table[1].Secret, victim.table[1].Secret} {
		tab := slices.Clone(attacker.table)
		tab[1].Handle, tab[1].Secret = vname, secret
		err := g.Import(tab)
		wantRefused(t, "the window of rank 1 ("+vname+") is not the one", err, chips[2], before, vname, 2) // the victim's own two ranks hold it
	}
	// A later generation of the victim's domain, reusing its names.
	later := slices.Clone(victim.table)
	for j := range later {
		later[j].Generation = 2
	}
	q := vreq
	q.Generation = 2
	g2, _, err := PrepareGlobal(q, 0, chips[3])
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Release()
	later[0] = g2.Descriptor()
	if err := g2.Import(later); kind.Of(err) != kind.ValueError || !strings.Contains(err.Error(), "the window of rank 1 ("+vname+") is not the one") {
		t.Errorf("the window of generation 1 in generation 2: %v", err)
	}
	// The victim's bytes are as it left them; the attacker's own domain works.
	if b := mustBytes(t, chips[1], victim.ranks[1].WindowBase(), 15); string(b) != "victim's secret" {
		t.Errorf("the victim's window holds %q", b)
	}
	attacker.importAll(t)
	attacker.commitAll(t)
}

// A pooled window taken again for a new domain is sealed with a new
// secret: the old domain's secret no longer opens it, even named in a
// table of the new domain, and the new one does.
func TestPooledWindowTakenAgainRefusesTheOldSecret(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	req := newGlobalReq(2, 4096)
	req.Pooled = true
	d := prepareDomain(t, req, chips, 1)
	d.importAll(t)
	old := slices.Clone(d.table)
	d.release(t)
	d.ranks = nil

	req2 := newGlobalReq(2, 4096)
	req2.Pooled = true
	d2 := prepareDomain(t, req2, chips, 1)
	if d2.table[1].Handle != old[1].Handle {
		t.Fatalf("the pool gave %s, want the window %s again", d2.table[1].Handle, old[1].Handle)
	}
	if d2.table[1].Secret == old[1].Secret {
		t.Fatal("a pooled window taken again kept its secret")
	}
	before := liveOf(chips[0])
	stale := slices.Clone(d2.table)
	stale[1].Secret = old[1].Secret
	err := d2.ranks[0].Import(stale)
	wantRefused(t, "the window of rank 1 ("+old[1].Handle+") is not the one", err, chips[0], before, old[1].Handle, 1, old[1].Secret)
	d2.importAll(t)
	d2.commitAll(t)
}

// A window of another process (outside this process's cache) that fails
// its check is closed again: nothing of it stays mapped or cached.
func TestRefusedWindowIsClosed(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	req := newGlobalReq(2, 4096)
	req.Pooled = true
	d := prepareDomain(t, req, chips, 1)
	name := pooledWindowName(shm.Prefix(), newGlobalKey())
	other, err := shm.CreateNamed(name, sealed(4096)) // a peer process's window
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	at := roundPage(4096)
	writeSeal(other.Mem[at:at+sealLen], seal{sealStamp{id: req.DomainID, gen: 1, what: sealWindow, rank: 1, ranks: 2, payload: 4096}, NewSecret()})
	tab := slices.Clone(d.table)
	tab[1].Handle = name
	before := liveOf(chips[0])
	err = d.ranks[0].Import(tab)
	wantRefused(t, "the window of rank 1 ("+name+") is not the one", err, chips[0], before, name, 0)
	cacheMu.Lock()
	_, cached := cache[name]
	_, isKept := kept[cache[name]]
	cacheMu.Unlock()
	if cached || isKept {
		t.Errorf("the refused window is still cached (%v) or kept (%v)", cached, isKept)
	}
	d.importAll(t)
}

// Another local user sees a live domain's names in /dev/shm, and that is
// all: as uid 65534 it can neither read nor write a window or the header
// by its name (objects are 0600, hal/shm), and the domain is unchanged.
func TestAnotherUserCannotOpenAWindowByItsName(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root, to act as another user (uid 65534)")
	}
	clean(t)
	d := committedDomain(t, 2)
	if err := d.chips[1].CopyIn(d.ranks[1].WindowBase(), []byte("rank 1's")); err != nil {
		t.Fatal(err)
	}
	as := func(args ...string) ([]byte, error) {
		cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups"}, args...)...)
		return cmd.CombinedOutput()
	}
	listed, err := as("ls", "/dev/shm")
	if err != nil {
		t.Fatalf("ls as another user: %v: %s", err, listed)
	}
	names := []string{d.table[0].Handle, d.table[1].Handle, globalHeaderOf(d.table[0].Handle)}
	for _, name := range names {
		if !strings.Contains(string(listed), name) {
			t.Fatalf("another user does not even see %s", name)
		}
		if out, err := as("dd", "if=/dev/shm/"+name, "of=/dev/null", "bs=64", "count=1"); err == nil {
			t.Errorf("another user read %s: %s", name, out)
		} else if !strings.Contains(string(out), "Permission denied") {
			t.Errorf("reading %s as another user failed otherwise: %s", name, out)
		}
		if out, err := as("dd", "if=/dev/zero", "of=/dev/shm/"+name, "bs=64", "count=1", "conv=notrunc"); err == nil {
			t.Errorf("another user wrote %s: %s", name, out)
		}
	}
	if b := mustBytes(t, d.chips[0], d.ranks[0].Bases()[1], 8); string(b) != "rank 1's" {
		t.Errorf("rank 1's window, seen by rank 0, holds %q", b)
	}
	barrierRounds(t, d.views(t), d.chips, 2)
}

// A larger object whose window bytes, at the place a smaller window's seal
// would be, hold a seal with a secret the table knows is refused: the seal
// is read only from an object of exactly the window's sealed size.
func TestSealOnlyAtTheObjectsEnd(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	req := newGlobalReq(2, 4096)
	req.Pooled = true
	d := prepareDomain(t, req, chips, 1)
	name := pooledWindowName(shm.Prefix(), newGlobalKey())
	big, err := shm.CreateNamed(name, sealed(3*4096)) // another, larger window
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	forged := NewSecret()
	at := roundPage(4096) // window bytes of the larger object
	writeSeal(big.Mem[at:at+sealLen], seal{sealStamp{id: req.DomainID, gen: 1, what: sealWindow, rank: 1, ranks: 2, payload: 4096}, forged})
	tab := slices.Clone(d.table)
	tab[1].Handle, tab[1].Secret = name, forged
	before := liveOf(chips[0])
	err = d.ranks[0].Import(tab)
	wantRefused(t, "the window of rank 1 ("+name+") is not the one", err, chips[0], before, name, 0, forged)
	d.importAll(t)
}
