package comm

// Global domains' requests and names.
//
// In the sim profile every window is a POSIX shm object named
//
//	<prefix>gdom-<domain id, hex>-<generation, hex>-<key>-r<rank, decimal>
//
// where <prefix> is the preparing node's (GlobalRequest.Prefix, by default
// shm.Prefix() of its process: "simpler-<pid>-") and <key> is 128 random
// bits (32 hex digits) the rank draws at Prepare, so that names never
// collide. The name is the descriptor's handle, so nodes need not share a
// prefix, and it is only a locator: /dev/shm lists it to every local user,
// and a client may put any name in a table. What lets a node map a window
// is the secret in the descriptor, which is in no name: the rank draws it
// at Prepare and seals it into the window's object, past the bytes any
// chip maps, and an importer maps an object only if its seal holds the
// descriptor's secret for this domain, generation and rank (seal.go). The
// header (the barrier and wait-sequence words that View uses, same layout
// as a local domain's, sealed with rank 0's secret) is created zeroed by
// rank 0's Prepare under
//
//	<rank 0's window name without "-r0">-hdr
//
// and every other rank derives that name from the table's descriptor of
// rank 0 at Import, retrying until it exists, within GlobalRequest.Timeout.
// Rank 0's Release unlinks it; ranks that have it mapped keep using it
// until they release. Each rank's Release unlinks its own window's name.
// Such objects are the domain's own: once every rank has released, nothing
// of the domain remains in /dev/shm. A pooled request (Pooled, for a chip
// in the node's own process) names its window "<prefix>gwin-<key>"
// instead and gives it back to the process's pool at Release
// (global_pool.go).
//
// Names are scoped by domain id and generation, so concurrent domains and
// the generations of one domain never collide. A (domain id, generation)
// pair is prepared once: a retry after an abort takes a new generation
// (re-preparing the same one is refused while its names exist, and a
// process that still maps a peer window of the old one could be handed that
// stale mapping).

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"time"

	"simpler/hal"
	"simpler/hal/shm"
	"simpler/kind"
)

// GlobalRequest describes one rank's part of one generation of a global
// domain. DomainID, Generation, Name, Ranks and WindowSize must be the
// same on every node; Prefix and Timeout are the node's own.
type GlobalRequest struct {
	// Prefix starts the names of the objects this node creates; "" means
	// shm.Prefix() of this process. It must start with "simpler-" and
	// contain no "/".
	Prefix     string
	DomainID   uint64
	Generation uint64
	Name       string        // the domain's label, for messages and the CommContext
	Ranks      int           // 1..4096
	WindowSize int           // bytes per rank, > 0
	Timeout    time.Duration // bound on Import waiting for rank 0's header, > 0
	// Pooled takes the window from this process's pool of global windows
	// and gives it back at Release, under a stable name (global_pool.go);
	// otherwise its objects are the domain's own, named as above.
	Pooled bool
	// Reuse, with Pooled, names the pooled window to take back: exactly
	// that one, idle in this process's pool (for rank 0 with its header),
	// or Prepare fails with a KeyError and changes nothing. Import then
	// does not wait for rank 0's header: a reused domain's header is a
	// pooled one that exists already, or was dropped and never comes back.
	Reuse string
	// ReuseSecret, with Reuse, is the secret the new domain's table gives
	// this rank (non-zero): the rank seals its window (and rank 0 the
	// header) with it instead of drawing one. A warm domain is brought up
	// on every node at once (REATTACH), so no node could learn a peer's
	// fresh secret in time; the broker draws them all and sends each in
	// the table. A node takes back only windows of its own pool, so a
	// secret chosen by a client seals only that client's own windows.
	ReuseSecret Secret
}

func (q *GlobalRequest) prefix() string {
	if q.Prefix != "" {
		return q.Prefix
	}
	return shm.Prefix()
}

// globalStem is the part of every name of one generation of a domain that
// follows the prefix: "gdom-<id>-<generation>-".
func globalStem(domainID, generation uint64) string {
	return "gdom-" + strconv.FormatUint(domainID, 16) + "-" + strconv.FormatUint(generation, 16) + "-"
}

// globalKeyLen is the length of a window name's key: 128 bits in hex.
const globalKeyLen = 32

// newGlobalKey draws a window name's key.
func newGlobalKey() string {
	var b [globalKeyLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}

func globalWindowSuffix(domainID, generation uint64, key string, rank int) string {
	return globalStem(domainID, generation) + key + "-r" + strconv.Itoa(rank)
}

// globalHeaderOf is the header's name, made from rank 0's window name.
func globalHeaderOf(window0 string) string {
	return strings.TrimSuffix(window0, "-r0") + "-hdr"
}

func (q *GlobalRequest) windowName(key string, rank int) string {
	return q.prefix() + globalWindowSuffix(q.DomainID, q.Generation, key, rank)
}

// windowKey returns the key of a window name of this domain's rank, if
// handle is one: a good prefix, this domain's stem, a key of lowercase
// hex, this rank.
func (q *GlobalRequest) windowKey(handle string, rank int) (string, bool) {
	stem := globalStem(q.DomainID, q.Generation)
	i := strings.Index(handle, stem)
	if i < 0 || !goodPrefix(handle[:i]) || len(handle) > DescriptorHandleMax {
		return "", false
	}
	rest := handle[i+len(stem):]
	key, r, ok := strings.Cut(rest, "-r")
	if !ok || len(key) != globalKeyLen || !lowerHex(key) || r != strconv.Itoa(rank) {
		return "", false
	}
	return key, true
}

// lowerHex reports whether s is lowercase hex digits only (a key's form).
// Every rank checks every descriptor's key: 32M digits at 1024 ranks, so
// one table look-up per digit rather than four compares.
func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !hexDigit[s[i]] {
			return false
		}
	}
	return true
}

var hexDigit = func() (t [256]bool) {
	for _, c := range "0123456789abcdef" {
		t[c] = true
	}
	return t
}()

// goodPrefix reports whether p may start an shm name of a domain.
func goodPrefix(p string) bool {
	return strings.HasPrefix(p, "simpler-") && !strings.ContainsAny(p, "/\x00")
}

// domain names the domain in messages.
func (q *GlobalRequest) domain() string { return globalDomainName(q.Name, q.DomainID, q.Generation) }

func globalDomainName(name string, id, gen uint64) string {
	// Built without fmt: every Prepare and Release makes it, also when
	// nothing fails (a warm domain's whole cost is a few microseconds).
	return strconv.Quote(name) + " (id " + strconv.FormatUint(id, 10) + ", generation " + strconv.FormatUint(gen, 10) + ")"
}

// maxWindow is the largest window View accepts.
const maxWindow = 1 << 40

// check refuses a bad request; what is "comm: preparing global domain ...".
func (q *GlobalRequest) check(what string, rank int, chip hal.Chip) error {
	if err := checkRequest(func() string { return what }, chip, q.Prefix, q.Ranks, rank, q.Timeout); err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return kind.Errorf(kind.ValueError, "%s: "+format, append([]any{what}, args...)...)
	}
	switch {
	case q.WindowSize <= 0 || q.WindowSize > maxWindow:
		return bad("window size must be in 1..%d, got %d", maxWindow, q.WindowSize)
	case q.Reuse != "" && (!q.Pooled || !pooledName(q.Reuse)):
		return bad("Reuse %q must name a pooled window, and the request be Pooled", q.Reuse)
	case (q.Reuse != "") == q.ReuseSecret.IsZero():
		return bad("Reuse and ReuseSecret go together: a reused window is sealed with the table's secret, and only a reused one")
	case chip.Platform().Serves(ProfileSim.String()) != nil:
		return bad("device %d is on platform %s, which has no %q comm profile", chip.DeviceID(), chip.Platform().Name(), ProfileSim.String())
	}
	if name := q.windowName(strings.Repeat("0", globalKeyLen), rank); len(name) > DescriptorHandleMax {
		return bad("the window name %q is longer than %d bytes (shorten the prefix)", name, DescriptorHandleMax)
	}
	return nil
}

// preparedKey names one rank of one generation of a domain made by this
// process: window names carry a random key, so it is this set, not the
// names, that refuses preparing the same rank twice.
type preparedKey struct {
	prefix         string
	id, generation uint64
	rank           int
}

var (
	preparedMu sync.Mutex
	prepared   = map[preparedKey]bool{}
)

func claimPrepared(k preparedKey) bool {
	preparedMu.Lock()
	defer preparedMu.Unlock()
	if prepared[k] {
		return false
	}
	prepared[k] = true
	return true
}

func unclaimPrepared(k preparedKey) {
	preparedMu.Lock()
	defer preparedMu.Unlock()
	delete(prepared, k)
}
