package comm

// Pooled global windows, and the peer mappings importers keep.
//
// A rank of a global domain prepared with GlobalRequest.Pooled takes its
// window from this process's pool of idle global windows, and gives it
// back at Release, under the same name: "<prefix>gwin-<key>", 128 random
// bits as for any window, so no two names collide. The name says nothing
// of the domain: the window's seal does (seal.go). Release zeroes the
// seal's secret, so no descriptor opens an idle window, and each take
// reseals it with a fresh secret for its new domain. A window that
// served rank 0 keeps the domain header it was given, "<window>-hdr", for
// life: rank 0 takes a window whose header has its domain's size (or that
// never had one, and makes it), so a name never comes back at another size.
// The owner clears the window (and the header) at Prepare, before its
// descriptor goes out: the zeroed-window contract of a domain holds for
// a pooled window as for a fresh one, and the domain id (the CommContext's
// allocation id) is the broker's fresh one.
//
// A request with Reuse takes back one named window, only if it is idle
// here (gpoolTakeNamed): a broker that remembers the windows of an earlier
// domain over the same members asks each node for exactly those, so every
// peer's kept mapping is of the window it will use. A window in use by
// another domain, or dropped, is refused; the broker then runs the full
// transaction.
//
// A pooled window is reused only once its rank here has released it, and
// a release comes after every kernel of the domain has finished (the
// broker frees a domain at its run's fence), so nothing writes to it any
// more, even where a peer on another node has not released yet.
//
// An importer keeps its mapping of a peer's pooled window (and header)
// once its last rank here releases it, so the next domain over the same
// windows (the same members, typically) opens nothing: the name finds the
// mapping in the object cache. Such a kept mapping goes when the bound
// below is passed (oldest first) or DrainPool runs. It cannot alias a
// different object: a pooled name is never made twice, and a header is
// never remade at another size.
//
// Process-mode nodes do not pool (their chip processes may die, and
// RemoveGlobalRank finds a dead rank's names by domain and rank): their
// windows keep the per-domain names of global_names.go.

import (
	"errors"
	"strings"
	"sync"
)

// Bounds of the idle windows an owner keeps and of the idle peer
// mappings an importer keeps (each one mapping, no descriptor open).
const (
	gpoolMaxObjects = 4096
	gpoolMaxBytes   = 256 << 20
	keptMaxObjects  = 8192
	keptMaxBytes    = 512 << 20
)

// gwin is an idle pooled window: its object (this process's, in the
// cache under its name) and the header it serves rank 0 with, if any.
type gwin struct {
	prefix   string
	win, hdr *object
}

var (
	gpoolMu    sync.Mutex
	gpool      []gwin // idle, oldest first
	gpoolBytes int
)

// pooledWindowName is the stable name of a pooled window.
func pooledWindowName(prefix, key string) string { return prefix + "gwin-" + key }

// pooledKey returns the key of a pooled window's name, if handle is one:
// a good prefix, "gwin-", then the key, 32 lowercase hex digits (which
// cannot contain "gwin-", so the name's last 37 bytes say it all). Every
// rank checks every descriptor of its table: this runs 1M times for a
// 1024-rank domain.
func pooledKey(handle string) (string, bool) {
	const tag = "gwin-"
	n := len(handle) - globalKeyLen - len(tag)
	if n < 0 || len(handle) > DescriptorHandleMax || handle[n:n+len(tag)] != tag || !goodPrefix(handle[:n]) {
		return "", false
	}
	key := handle[n+len(tag):]
	if !lowerHex(key) {
		return "", false
	}
	return key, true
}

// gpoolTake takes an idle window of size bytes under prefix: for rank 0
// (hdrSize > 0) one whose header has hdrSize bytes or that has none, else
// preferably one without a header. ok is false if there is none.
func gpoolTake(prefix string, size, hdrSize int) (gwin, bool) {
	gpoolMu.Lock()
	defer gpoolMu.Unlock()
	best, second := -1, -1
	for i := len(gpool) - 1; i >= 0; i-- { // newest first: most likely resident
		w := gpool[i]
		if w.prefix != prefix || len(w.win.seg.Mem) != size {
			continue
		}
		switch {
		case hdrSize > 0 && w.hdr != nil && len(w.hdr.seg.Mem) == hdrSize, hdrSize == 0 && w.hdr == nil:
			best = i
		case hdrSize > 0 && w.hdr == nil, hdrSize == 0:
			if second < 0 {
				second = i
			}
		}
		if best >= 0 {
			break
		}
	}
	if best < 0 {
		best = second
	}
	if best < 0 {
		return gwin{}, false
	}
	w := gpool[best]
	gpool = append(gpool[:best], gpool[best+1:]...)
	gpoolBytes -= w.bytes()
	return w, true
}

// gpoolTakeNamed takes the idle window called name, of size bytes under
// prefix, if it is in the pool: for rank 0 (hdrSize > 0) only with a
// header of hdrSize bytes. ok is false, and the pool unchanged, if not.
func gpoolTakeNamed(prefix, name string, size, hdrSize int) (gwin, bool) {
	gpoolMu.Lock()
	defer gpoolMu.Unlock()
	for i := len(gpool) - 1; i >= 0; i-- {
		w := gpool[i]
		if w.win.seg.Name != name {
			continue
		}
		if w.prefix != prefix || len(w.win.seg.Mem) != size || (hdrSize > 0 && (w.hdr == nil || len(w.hdr.seg.Mem) != hdrSize)) {
			return gwin{}, false
		}
		gpool = append(gpool[:i], gpool[i+1:]...)
		gpoolBytes -= w.bytes()
		return w, true
	}
	return gwin{}, false
}

// idle zeroes the secret in the seals of an idle window and its header:
// the descriptors of the domain that used it open it no more.
func (w gwin) idle() {
	idleOwn(w.win)
	if w.hdr != nil {
		idleOwn(w.hdr)
	}
}

func (w gwin) bytes() int {
	n := len(w.win.seg.Mem)
	if w.hdr != nil {
		n += len(w.hdr.seg.Mem)
	}
	return n
}

// gpoolPut keeps w for reuse and drops the oldest idle windows beyond the
// bounds.
func gpoolPut(w gwin) error {
	gpoolMu.Lock()
	gpool = append(gpool, w)
	gpoolBytes += w.bytes()
	var evict []gwin
	for len(gpool) > gpoolMaxObjects || gpoolBytes > gpoolMaxBytes {
		evict = append(evict, gpool[0])
		gpoolBytes -= gpool[0].bytes()
		gpool = gpool[1:]
	}
	gpoolMu.Unlock()
	var errs []error
	for _, e := range evict {
		errs = append(errs, e.drop())
	}
	return errors.Join(errs...)
}

// drop removes an idle window's names and lets go of this process's
// mapping (peers that keep one keep it).
func (w gwin) drop() error {
	var errs []error
	for _, o := range []*object{w.win, w.hdr} {
		if o != nil {
			errs = append(errs, o.retire(), o.release())
		}
	}
	return errors.Join(errs...)
}

// drainGlobalPool drops every idle pooled window and every kept peer
// mapping (DrainPool).
func drainGlobalPool() error {
	gpoolMu.Lock()
	idle := gpool
	gpool, gpoolBytes = nil, 0
	gpoolMu.Unlock()
	var errs []error
	for _, w := range idle {
		errs = append(errs, w.drop())
	}
	return errors.Join(append(errs, dropKept(0, 0))...)
}

// gpoolLen is the number of idle pooled windows (for tests).
func gpoolLen() int {
	gpoolMu.Lock()
	defer gpoolMu.Unlock()
	return len(gpool)
}

// Kept peer mappings: objects this process opened (not created) under a
// pooled name whose last rank here released them. They stay in the cache
// with no reference, so the next open of the name takes them back
// (openObject, under cacheMu); kept orders them for eviction.
var (
	kept      = map[*object]uint64{} // under cacheMu: → when it was kept
	keptSeq   uint64
	keptBytes int
)

// keepable reports whether an object opened here may be kept idle: a
// pooled global window or its header.
func keepable(name string) bool {
	if _, ok := pooledKey(strings.TrimSuffix(name, "-hdr")); ok {
		return true
	}
	return false
}

// keep makes o, whose references just ran out, a kept mapping. Caller
// holds cacheMu; the objects to close (evicted ones) are returned.
func keep(o *object) []*object {
	keptSeq++
	kept[o] = keptSeq
	keptBytes += len(o.seg.Mem)
	return evictKept(keptMaxObjects, keptMaxBytes)
}

// unkeep takes o back into use (openObject found it). Caller holds cacheMu.
func unkeep(o *object) {
	if _, ok := kept[o]; ok {
		delete(kept, o)
		keptBytes -= len(o.seg.Mem)
	}
}

// evictKept drops the oldest kept mappings beyond the bounds from the
// cache and returns them to be closed. Caller holds cacheMu.
func evictKept(maxObjects, maxBytes int) []*object {
	var out []*object
	for len(kept) > maxObjects || keptBytes > maxBytes {
		var oldest *object
		for o, at := range kept {
			if oldest == nil || at < kept[oldest] {
				oldest = o
			}
		}
		delete(kept, oldest)
		keptBytes -= len(oldest.seg.Mem)
		if cache[oldest.key] == oldest {
			delete(cache, oldest.key)
		}
		out = append(out, oldest)
	}
	return out
}

// dropKept closes kept mappings down to the bounds given.
func dropKept(maxObjects, maxBytes int) error {
	cacheMu.Lock()
	out := evictKept(maxObjects, maxBytes)
	cacheMu.Unlock()
	return closeObjects(out)
}

// closeObjects unmaps evicted kept mappings.
func closeObjects(os []*object) error {
	var errs []error
	for _, o := range os {
		errs = append(errs, o.seg.Close())
	}
	return errors.Join(errs...)
}
