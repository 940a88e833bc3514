package comm

// Shared-memory objects behind the domains: a process-wide cache of
// mappings by name, and a pool of released objects.
//
// The cache lets the ranks that run in this process share one mapping of
// each object (a peer's window, the header) instead of mapping it once per
// rank: every mapping pays its own page faults on first touch. Ranks in
// other processes map the same names themselves.
//
// The pool exists because fresh shared memory is expensive (create, size,
// map, then a page fault and zero-fill per page on first touch; unmap
// later), while clearing memory that is already resident is fast. A
// local domain's object created here (a rank's window, or a header this
// process created) loses its name once nobody needs to find it (retire: a
// window when its rank releases, a header once every rank has joined):
// it is renamed to a pool name and, once its last user in this process
// has released it, kept mapped; the next object of the same size is
// renamed to its new name and cleared instead of being created. Renaming
// keeps the rules that an allocation's objects are found by name only and
// that nothing is left under an allocation's names once it is released.
//
// An object is only recycled once no rank of this process uses it. Ranks
// in other processes may still have it mapped; that is safe because a
// local domain is released as a whole, after its kernels have finished.
// A global domain is not (its nodes release one by one), so its objects
// are never in this pool: retire unlinks them, or a pooled global window
// goes to its own pool (global_pool.go).

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"simpler/hal/shm"
)

// shmDir is where hal/shm keeps its objects.
const shmDir = "/dev/shm/"

// Pool bounds. The count allows a domain over every chip of a node (16
// windows and a header) to recycle entirely; the bytes bound is what
// keeps idle memory in check.
const (
	poolMaxObjects = 32
	poolMaxBytes   = 512 << 20
)

// object is one mapped shm object, shared by the ranks of this process.
type object struct {
	seg      *shm.Segment
	key      string      // the name it is cached under
	refs     int         // guarded by cacheMu
	recycle  bool        // created here: the last release pools it
	parked   bool        // already renamed to a pool name while in use
	peer     bool        // opened here, not created: may be kept idle (global_pool.go)
	prefix   string      // the request's name prefix, reused for its pool name
	verified atomic.Bool // a global window or header whose seal matched a descriptor here (seal.go)
	sealCopy sealCopy    // created here: the seal its owner wrote (seal.go)
}

var (
	cacheMu sync.Mutex
	cache   = map[string]*object{}

	poolMu    sync.Mutex
	pool      []*shm.Segment // idle, oldest first
	poolBytes int
	// poolOff disables pooling (benchmarks compare both ways).
	poolOff atomic.Bool
)

// errNotReady means an object another rank is creating is not usable yet.
var errNotReady = errors.New("not created yet")

// createObject makes the object name of size bytes, exclusively, with
// its first clearLen bytes zero, and enters it in the cache so that the
// ranks of this process that open it share the mapping. A pooled object
// (one that goes back to the pool when released here) is taken from the
// pool if one of that size is idle.
func createObject(prefix, name string, size, clearLen int, pooled bool) (*object, error) {
	seg, err := newSegment(name, size, clearLen, pooled)
	if err != nil {
		return nil, err
	}
	return cacheNew(&object{seg: seg, key: name, refs: 1, recycle: pooled, prefix: prefix})
}

// newSegment creates the shm object name exclusively: an idle pooled one
// of size bytes, cleared up to clearLen and renamed (if pooled and there
// is one), else a fresh one, which the kernel zero-fills.
func newSegment(name string, size, clearLen int, pooled bool) (*shm.Segment, error) {
	if pooled {
		if seg, err := poolTake(name, size, clearLen); seg != nil || err != nil {
			return seg, err
		}
	}
	return shm.CreateNamed(name, size)
}

// cacheNew enters an object this process just created in the cache. A
// name already there is unreachable while names are unique per allocation
// and rank; the object itself was created exclusively, so only the cache
// would be stale.
func cacheNew(o *object) (*object, error) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if cache[o.key] != nil {
		return nil, errors.Join(fmt.Errorf("comm: %s is already mapped in this process", o.key), o.seg.Close())
	}
	cache[o.key] = o
	return o, nil
}

// openObject maps the existing object name (size bytes), sharing this
// process's mapping if there is one. With create set it first tries to
// create the object (zero-filled) exclusively, from the pool or fresh, and
// reports whether it did; a creator elsewhere that has not yet sized the
// object, or that has already removed its name, gives errNotReady.
func openObject(prefix, name string, size int, create bool) (o *object, created bool, err error) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if o := cache[name]; o != nil {
		if len(o.seg.Mem) < size {
			return nil, false, fmt.Errorf("comm: %s is mapped with %d bytes, want %d", name, len(o.seg.Mem), size)
		}
		if o.refs == 0 {
			unkeep(o)
		}
		o.refs++
		return o, false, nil
	}
	var seg *shm.Segment
	if create {
		seg, err = newSegment(name, size, size, true)
		if err == nil {
			created = true
		} else if !errors.Is(err, unix.EEXIST) {
			return nil, false, err
		}
	}
	if seg == nil {
		seg, err = shm.Open(name, size)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil, false, errNotReady
			}
			// The creator truncates right after creating; between the two
			// the object exists with size 0. (Checking the size again here
			// would race with that truncate: take Open's own answer.)
			if errors.Is(err, shm.ErrTooSmall) {
				return nil, false, errNotReady
			}
			return nil, false, err
		}
	}
	o = &object{seg: seg, key: name, refs: 1, recycle: created, prefix: prefix, peer: !created}
	cache[name] = o
	return o, created, nil
}

// awaitObject is openObject retried while the object is not ready (a
// creator elsewhere has not made or sized it yet) until deadline; past it
// the error is errNotReady. Polling is the only portable way to wait for
// a name to appear, and the back-off keeps it cheap.
func awaitObject(prefix, name string, size int, create bool, deadline time.Time) (*object, bool, error) {
	pause := 20 * time.Microsecond
	for {
		o, created, err := openObject(prefix, name, size, create)
		if !errors.Is(err, errNotReady) || time.Now().After(deadline) {
			return o, created, err
		}
		time.Sleep(pause)
		pause = min(2*pause, 2*time.Millisecond)
	}
}

// retire removes the name of an object created here while it stays in
// use, once nobody needs to find it by name: renamed to a pool name if it
// will be recycled, unlinked otherwise. It also leaves the cache, so that
// no rank of this process finds it by that name either: after retire, an
// open of the name fails in every process alike. Only the creator calls
// it; a second call does nothing.
func (o *object) retire() error {
	cacheMu.Lock() // release reads the flags
	defer cacheMu.Unlock()
	if cache[o.key] == o {
		delete(cache, o.key)
	}
	if o.parked {
		return nil
	}
	if !o.recycle || poolOff.Load() {
		o.recycle = false
		return o.seg.Unlink()
	}
	if err := o.seg.Rename(poolName(o.prefix)); err != nil {
		o.recycle = false
		return errors.Join(err, o.seg.Unlink())
	}
	o.parked = true
	return nil
}

// release drops one reference; the last one unmaps the object or, for one
// created here, returns it to the pool. An object created here and not
// pooled is unlinked by its Segment's Close.
func (o *object) release() error {
	cacheMu.Lock()
	o.refs--
	last := o.refs == 0
	if last && o.peer && cache[o.key] == o && keepable(o.key) && !poolOff.Load() {
		evicted := keep(o) // a peer's pooled window: kept mapped, in the cache
		cacheMu.Unlock()
		return closeObjects(evicted)
	}
	if last && cache[o.key] == o {
		delete(cache, o.key)
	}
	recycle, parked := o.recycle, o.parked
	cacheMu.Unlock()
	if !last {
		return nil
	}
	if recycle {
		return poolPut(o.seg, o.prefix, parked)
	}
	return o.seg.Close()
}

// discard drops the reference an open took on an object that then failed
// its check (a global window whose seal is not the descriptor's): like
// release, but the last reference unmaps it rather than keeping it, and
// takes it out of the cache, so nothing of the refused object stays. An
// object created here is never discarded: its creator holds a reference.
func (o *object) discard() error {
	cacheMu.Lock()
	o.refs--
	last := o.refs == 0
	if last && cache[o.key] == o {
		delete(cache, o.key)
	}
	cacheMu.Unlock()
	if !last {
		return nil
	}
	return o.seg.Close()
}

// poolName is a fresh name for an idle object: random, like every name
// of this process, so that nobody can take it first.
func poolName(prefix string) string {
	var b [8]byte
	rand.Read(b[:]) // crypto/rand does not fail on Linux
	return prefix + "dompool-" + hex.EncodeToString(b[:])
}

// poolTake takes an idle object of exactly size bytes, renames it to name
// (exclusively: an existing name gives an error wrapping EEXIST and leaves
// the object in the pool) and clears its first clearLen bytes. It returns
// nil if no object of that size is idle.
func poolTake(name string, size, clearLen int) (*shm.Segment, error) {
	poolMu.Lock()
	var seg *shm.Segment
	for i := len(pool) - 1; i >= 0; i-- { // newest first: most likely resident
		if len(pool[i].Mem) == size {
			seg = pool[i]
			pool = append(pool[:i], pool[i+1:]...)
			poolBytes -= size
			break
		}
	}
	poolMu.Unlock()
	if seg == nil {
		return nil, nil
	}
	// Clear before the object gets its name: a header is used as soon as
	// another process can open it, and a clear after that could erase an
	// arrival.
	clear(seg.Mem[:clearLen])
	// The Segment's Name follows the object (it unlinks by Name on
	// Close). The pool handed it over exclusively: nobody else reads it.
	if err := seg.Rename(name); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil, errors.Join(err, poolPut(seg, "", true))
		}
		return nil, errors.Join(err, seg.Close())
	}
	return seg, nil
}

// poolPut keeps seg mapped for reuse, renamed to a pool name unless
// parked says it has one already, and evicts the oldest idle objects
// beyond the bounds. With the pool off it closes (unmaps and unlinks) seg.
func poolPut(seg *shm.Segment, prefix string, parked bool) error {
	if poolOff.Load() || len(seg.Mem) > poolMaxBytes {
		return seg.Close()
	}
	if !parked {
		if err := seg.Rename(poolName(prefix)); err != nil {
			return errors.Join(err, seg.Close())
		}
	}
	poolMu.Lock()
	pool = append(pool, seg)
	poolBytes += len(seg.Mem)
	var evict []*shm.Segment
	for len(pool) > poolMaxObjects || poolBytes > poolMaxBytes {
		evict = append(evict, pool[0])
		poolBytes -= len(pool[0].Mem)
		pool = pool[1:]
	}
	poolMu.Unlock()
	return closeAll(evict)
}

// DrainPool tears down every parked rank of a warm slot (warm.go), then
// drains the idle objects (DrainObjects). Tests call it before checking
// for leftover objects, and a chip's process calls it as it shuts down,
// before its chip closes.
func DrainPool() error {
	return errors.Join(dropParked(func(warmKey) bool { return true }), DrainObjects())
}

// DrainObjects unmaps and unlinks every idle pooled object and global
// window, and drops the kept peer mappings; objects of live domains and
// parked ranks are untouched. A Worker calls it when it closes: parked
// ranks are mapped in chips, and other Workers of the process may still
// own theirs (each drops its own, DropWarm, before its chips close).
func DrainObjects() error {
	err := drainGlobalPool()
	poolMu.Lock()
	idle := pool
	pool, poolBytes = nil, 0
	poolMu.Unlock()
	return errors.Join(err, closeAll(idle))
}

// closeAll unmaps and unlinks segs, every one whatever the others say.
func closeAll(segs []*shm.Segment) error {
	var errs []error
	for _, s := range segs {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// poolLen reports the number of idle pooled objects (for tests).
func poolLen() int {
	poolMu.Lock()
	defer poolMu.Unlock()
	return len(pool)
}
