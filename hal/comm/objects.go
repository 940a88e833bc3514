package comm

// Shared-memory objects behind the domains: a process-wide cache of
// mappings by name, and a pool of released windows.
//
// The cache lets the ranks that run in this process share one mapping of
// each object (a peer's window, the header) instead of mapping it once per
// rank: mmap is cheap, but every mapping pays its own page faults on first
// touch. Ranks in other processes map the same names themselves.
//
// The pool exists because fresh shared memory is expensive to touch (a
// page fault and a zero-fill per page), while clearing memory that is
// already resident is fast. A window whose last user in this process
// releases it is renamed to a pool name and kept mapped; the next window
// of the same object size is renamed to its new name and cleared instead
// of being created. Renaming keeps the rule that an allocation's objects
// are found by name only, and that nothing outlives DrainPool.

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"simpler/hal/shm"
)

// shmDir is where hal/shm keeps its objects; renames go through it.
const shmDir = "/dev/shm/"

const (
	poolMaxObjects = 8
	poolMaxBytes   = 512 << 20
)

// object is one mapped shm object, shared by the ranks of this process.
type object struct {
	seg    *shm.Segment
	key    string // the name it is cached under
	refs   int    // guarded by cacheMu
	window bool   // this rank's own window, created here: pooled when done
	prefix string // the request's name prefix, reused for its pool name
}

var (
	cacheMu sync.Mutex
	cache   = map[string]*object{}

	poolMu    sync.Mutex
	pool      []*shm.Segment // oldest first
	poolBytes int
	poolSeq   atomic.Uint64
	// poolOff disables pooling (benchmarks compare both ways).
	poolOff atomic.Bool
)

// errNotReady means an object another rank is creating is not usable yet.
var errNotReady = errors.New("not created yet")

// createWindow makes the object for this rank's window under name, of
// size bytes, with its first clear bytes zero: a pooled object if one of
// that size is idle, a fresh one otherwise.
func createWindow(prefix, name string, size, clearLen int) (*object, error) {
	seg, err := poolTake(name, size)
	if err != nil {
		return nil, err
	}
	if seg != nil {
		clear(seg.Mem[:clearLen])
	} else if seg, err = shm.CreateNamed(name, size); err != nil {
		return nil, err // fresh objects are zero-filled by the kernel
	}
	o := &object{seg: seg, key: name, refs: 1, window: true, prefix: prefix}
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if cache[name] != nil {
		// Unreachable while names are unique per allocation and rank; the
		// object itself was created exclusively, so only the cache is stale.
		return nil, errors.Join(fmt.Errorf("comm: %s is already mapped in this process", name), seg.Close())
	}
	cache[name] = o
	return o, nil
}

// openObject maps the existing object name (size bytes), sharing this
// process's mapping if there is one. With create set it first tries to
// create the object exclusively and reports whether it did; a creator that
// has not yet sized it, or that has already unlinked it, gives
// errNotReady.
func openObject(name string, size int, create bool) (o *object, created bool, err error) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if o := cache[name]; o != nil {
		if len(o.seg.Mem) < size {
			return nil, false, fmt.Errorf("comm: %s is mapped with %d bytes, want %d", name, len(o.seg.Mem), size)
		}
		o.refs++
		return o, false, nil
	}
	var seg *shm.Segment
	if create {
		seg, err = shm.CreateNamed(name, size)
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
			// the object exists with size 0.
			if st, serr := os.Stat(shmDir + name); serr == nil && st.Size() < int64(size) {
				return nil, false, errNotReady
			}
			return nil, false, err
		}
	}
	o = &object{seg: seg, key: name, refs: 1}
	cache[name] = o
	return o, created, nil
}

// release drops one reference; the last one unmaps the object or, for a
// window created here, returns it to the pool. An object that was created
// here and not pooled is unlinked by its Segment's Close.
func (o *object) release() error {
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
	if o.window {
		return poolPut(o.seg, o.prefix)
	}
	return o.seg.Close()
}

// rename moves an object to a new name, failing if the new name exists
// (a plain rename would silently replace it).
func rename(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, shmDir+from, unix.AT_FDCWD, shmDir+to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		// A kernel or file system without RENAME_NOREPLACE: check, then
		// rename. Names are unique per allocation, so the window between
		// the two is not contended.
		if _, serr := os.Lstat(shmDir + to); serr == nil {
			err = unix.EEXIST
		} else {
			err = os.Rename(shmDir+from, shmDir+to)
		}
	}
	if err != nil {
		return fmt.Errorf("comm: rename %s to %s: %w", from, to, err)
	}
	return nil
}

// poolTake takes an idle object of exactly size bytes and renames it to
// name; nil if there is none.
func poolTake(name string, size int) (*shm.Segment, error) {
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
	if err := rename(seg.Name, name); err != nil {
		return nil, errors.Join(err, seg.Close())
	}
	// The Segment unlinks by its Name on Close, so it must follow the
	// object. The pool handed it over exclusively, so nobody else reads it.
	seg.Name = name
	return seg, nil
}

// poolPut keeps seg mapped under a pool name for reuse, evicting the
// oldest idle objects beyond the bounds; with the pool off, or for an
// object larger than the whole pool, it closes (unmaps and unlinks) seg.
func poolPut(seg *shm.Segment, prefix string) error {
	if poolOff.Load() || len(seg.Mem) > poolMaxBytes {
		return seg.Close()
	}
	name := fmt.Sprintf("%sdompool-%d-%d", prefix, os.Getpid(), poolSeq.Add(1))
	if err := rename(seg.Name, name); err != nil {
		return errors.Join(err, seg.Close())
	}
	seg.Name = name
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
	var errs []error
	for _, s := range evict {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// DrainPool unmaps and unlinks every idle pooled window. Windows of live
// domains are untouched. Tests call it before checking for leftover
// objects, and a Worker calls it when it closes.
func DrainPool() error {
	poolMu.Lock()
	idle := pool
	pool, poolBytes = nil, 0
	poolMu.Unlock()
	var errs []error
	for _, s := range idle {
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
