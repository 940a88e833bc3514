package comm

// Seals: what makes a global domain's window, and its header, a
// capability.
//
// A window's name is only a locator: /dev/shm lists it to every local
// user, and a client may put any name in a descriptor table. What a node
// checks before it maps a peer's window into a chip is the window's seal,
// a record in a page at the end of the window's object that no chip ever
// maps (the chip is given the window's first WindowSize bytes only):
//
//	word 0  seq: odd while the owner rewrites the seal, even when whole,
//	        0 if it was never sealed
//	word 1  domain id
//	word 2  generation
//	word 3  what: sealWindow or sealHeader
//	word 4  rank (the header: 0, rank 0 seals it)
//	word 5  rank count
//	word 6  payload: the window's (or header's) bytes before the seal page
//	word 7  secret, first 8 bytes
//	word 8  secret, last 8 bytes
//
// Each word is stored and loaded atomically, and seq brackets a rewrite,
// since the owner reseals a pooled window while peers in other processes
// may be reading it.
//
// The owning rank draws the secret at Prepare (a fresh one every time a
// pooled window is taken for a new domain) and exports it in its
// descriptor and nowhere else; rank 0 seals the domain's header with its
// own secret. An importer opens a peer's object by name, reads the seal
// and maps the object only if the seal is of this domain, generation,
// rank and kind and its secret equals the descriptor's (compared in
// constant time). The seal is read only from an object of exactly its
// window's sealed size (sealedSize), and in the owner's own process from
// the owner's copy (sealCopy). Anything else closes the object again and
// is refused with a ValueError naming the rank; no message carries a
// secret. A window going back to its pool has its secret zeroed (idle), so
// no descriptor opens it until it is taken again.
//
// The one exception: REATTACH brings every node of a warm domain up at
// once, so an importer may read a peer's seal before the peer's owner has
// resealed it for the new domain (or the owner's REATTACH fails and it
// never does). A reattaching import therefore also takes a peer's object
// that is idle in its owner's pool (its secret zeroed) and sealed for the
// same rank, rank count and size, if this process has verified that very
// mapping against a descriptor's secret before (object.verified): proof
// that the object is a window this process was given, not merely one it
// can name. A process serves one parent (a session process, or a parent's
// own process), and a pooled window stays in its owner's process, so this
// never lets a parent map a window it was not given. A process that never
// verified the mapping, such as another parent's session, gets the strict
// check only, and a window live in another domain is refused to all. The
// decision is sealVerdict, a pure function the tests step directly.

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"simpler/internal/futex"
)

// Secret is a window's capability: 128 random bits drawn by its owner
// (NewSecret). It formats as "secret(…)" under every verb, so that a
// descriptor or a request printed by mistake shows none of it.
type Secret [16]byte

// NewSecret draws a secret, never the zero one.
func NewSecret() Secret {
	var s Secret
	for s.IsZero() {
		if _, err := rand.Read(s[:]); err != nil {
			panic(err) // crypto/rand does not fail on Linux
		}
	}
	return s
}

// IsZero reports whether s is all zero: no secret, refused wherever a
// secret is taken.
func (s Secret) IsZero() bool { return s == Secret{} }

// Format prints no bit of the secret, whatever the verb.
func (s Secret) Format(f fmt.State, verb rune) { io.WriteString(f, "secret(…)") }

// sealSize is the page at the end of a global window's or header's object
// that holds its seal; sealLen is what of it the seal uses.
var sealSize = pageSize

const sealLen = 72

// What a seal seals.
const (
	sealWindow = 1
	sealHeader = 2
)

// sealStamp is what a seal says its object is.
type sealStamp struct {
	id, gen uint64
	what    uint64
	rank    uint64
	ranks   uint64
	payload uint64
}

// seal is a whole seal as read.
type seal struct {
	stamp  sealStamp
	secret Secret
}

// sealed is an object's size with its seal page: payload rounded up to
// pages, then the seal. The seal is at sealed(payload)-sealSize.
func sealed(payload int) int { return roundPage(payload) + sealSize }

// sealBytes is the seal of an object whose payload is payload bytes: the
// object is mapped with at least sealed(payload) bytes.
func sealBytes(o *object, payload int) []byte {
	at := roundPage(payload)
	return o.seg.Mem[at : at+sealLen]
}

// ownSeal is the seal of an object this process created with a seal page:
// its last page (a spare header's payload is not this request's).
func ownSeal(o *object) []byte {
	at := len(o.seg.Mem) - sealSize
	return o.seg.Mem[at : at+sealLen]
}

// clearPayload zeroes what an object created here with a seal page holds
// before its seal.
func clearPayload(o *object) { clear(o.seg.Mem[:len(o.seg.Mem)-sealSize]) }

// sealCopy is a seal in this process's memory: the copy an object created
// here keeps of the seal its owner wrote into it. Importers in this
// process read the copy instead of the object's seal page: the owner is
// the only writer of both, and a page of every peer's object read by
// every rank is 1M page reads for 1024 ranks in one process.
type sealCopy [sealLen / 8]uint64

func (c *sealCopy) bytes() []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&c[0])), sealLen) }

// sealOwn writes s as the seal of o, an object created here: into the
// object, for other processes, and into its copy, for this one.
func sealOwn(o *object, s seal) {
	writeSeal(ownSeal(o), s)
	writeSeal(o.sealCopy.bytes(), s)
}

// idleOwn zeroes the secret of o's seal, o an object created here.
func idleOwn(o *object) {
	idleSeal(ownSeal(o))
	idleSeal(o.sealCopy.bytes())
}

// sealToRead is where an importer reads the seal of o, whose payload is
// payload bytes: its copy if this process created it, else its page.
func sealToRead(o *object, payload int) []byte {
	if !o.peer {
		return o.sealCopy.bytes()
	}
	return sealBytes(o, payload)
}

// writeSeal stores s into b, a seal. The owner of the object is its only
// writer.
func writeSeal(b []byte, s seal) {
	seq := futex.Word64(b, 0)
	n := atomic.LoadUint64(seq)
	atomic.StoreUint64(seq, n|1) // odd: being rewritten
	w := func(i int, v uint64) { atomic.StoreUint64(futex.Word64(b, 8*i), v) }
	w(1, s.stamp.id)
	w(2, s.stamp.gen)
	w(3, s.stamp.what)
	w(4, s.stamp.rank)
	w(5, s.stamp.ranks)
	w(6, s.stamp.payload)
	w(7, binary.LittleEndian.Uint64(s.secret[:8]))
	w(8, binary.LittleEndian.Uint64(s.secret[8:]))
	atomic.StoreUint64(seq, (n|1)+1) // even again, and never 0
}

// idleSeal zeroes the secret of b, a seal, keeping its stamp: an idle
// pooled window (or header) that no descriptor opens.
func idleSeal(b []byte) {
	s, ok := readSeal(b)
	if !ok {
		return
	}
	s.secret = Secret{}
	writeSeal(b, s)
}

// readSeal loads the seal in b; ok is false if it was never written or is
// being rewritten.
func readSeal(b []byte) (s seal, ok bool) {
	seq := futex.Word64(b, 0)
	n := atomic.LoadUint64(seq)
	if n == 0 || n&1 == 1 {
		return seal{}, false
	}
	r := func(i int) uint64 { return atomic.LoadUint64(futex.Word64(b, 8*i)) }
	s.stamp = sealStamp{id: r(1), gen: r(2), what: r(3), rank: r(4), ranks: r(5), payload: r(6)}
	binary.LittleEndian.PutUint64(s.secret[:8], r(7))
	binary.LittleEndian.PutUint64(s.secret[8:], r(8))
	if atomic.LoadUint64(seq) != n {
		return seal{}, false
	}
	return s, true
}

// verdict is what an importer makes of a seal.
type verdict int

const (
	sealMatches verdict = iota // map it: the descriptor's secret
	sealKnown                  // map it: reattaching, the seal this process verified before
	sealNotYet                 // look again, until the deadline
	sealRefused                // not the object the descriptor names
)

// sealVerdict decides on got (ok: it was whole) for an import that wants
// the stamp want with the descriptor's secret; verified says this process
// has matched a descriptor's secret on the same mapping before, and
// reattach that the import is a REATTACH's.
func sealVerdict(got seal, ok bool, want sealStamp, secret Secret, verified, reattach bool) verdict {
	switch {
	case !ok:
		return sealNotYet // never sealed yet, or being rewritten
	case got.stamp == want:
		if secret.IsZero() || subtle.ConstantTimeCompare(got.secret[:], secret[:]) != 1 {
			return sealRefused
		}
		return sealMatches
	case reattach && verified && got.secret.IsZero() && sameWindow(got.stamp, want):
		return sealKnown // idle: its owner has not resealed it for the new domain yet
	}
	return sealRefused
}

// sameWindow reports whether two stamps are of the same place in domains
// of the same shape: a pooled window keeps its rank, kind, rank count and
// size across the warm domains over it, only the domain id and generation
// change.
func sameWindow(a, b sealStamp) bool {
	return a.what == b.what && a.rank == b.rank && a.ranks == b.ranks && a.payload == b.payload
}

// sealedSize reports whether the object behind o, opened by its name, is
// exactly sealed(payload) bytes. An open maps only the bytes asked for, so
// in a larger object the place of the seal would be window bytes, which
// whoever writes that window could make look like a seal. Checked once per
// mapping (a verified one was checked), by the name: objects are created
// exclusively under names never made twice, and hal/shm opens only our
// own, so the name is still that object's.
func sealedSize(o *object, payload int) bool {
	if !o.peer { // created here at its size, and mapped whole
		return len(o.seg.Mem) == sealed(payload)
	}
	st, err := os.Stat(shmDir + o.seg.Name)
	return err == nil && st.Size() == int64(sealed(payload))
}

// errSealRefused and errSealTimeout are awaitSeal's failures, for the
// caller to word.
var (
	errSealRefused = fmt.Errorf("not the object its descriptor names")
	errSealTimeout = fmt.Errorf("not sealed for this domain in time")
)

// awaitSeal checks the seal of o (whose payload is payload bytes) against
// want and secret, looking again while the verdict is sealNotYet until
// deadline. A match marks the mapping o verified.
func awaitSeal(o *object, payload int, want sealStamp, secret Secret, reattach bool, deadline time.Time) error {
	if !o.verified.Load() && !sealedSize(o, payload) {
		return errSealRefused
	}
	b := sealToRead(o, payload)
	pause := 20 * time.Microsecond
	for {
		got, ok := readSeal(b)
		switch sealVerdict(got, ok, want, secret, o.verified.Load(), reattach) {
		case sealMatches:
			if !o.verified.Load() { // a store is a locked instruction: once per mapping
				o.verified.Store(true)
			}
			return nil
		case sealKnown:
			return nil
		case sealRefused:
			return errSealRefused
		}
		if !time.Now().Before(deadline) {
			return errSealTimeout
		}
		time.Sleep(pause)
		pause = min(2*pause, 2*time.Millisecond)
	}
}
