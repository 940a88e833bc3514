package comm

// Go-level wake-ups for the ranks a process hosts itself.
//
// A signal wait (View.Wait) normally ends in a futex sleep on its rank's
// sequence word, so that a notifier in any process can wake it. In thread
// mode every rank of a domain is a goroutine of one process, and a futex
// sleep costs an OS thread per waiter and a kernel wake-up per hand-off
// (50-100 µs on the virtual machines this runs on; a 1024-rank ring makes
// 2046 hand-offs in sequence). So this process keeps, per mapped header
// (keyed by its host address: the ranks of one process share one mapping
// of it, objects.go), how many of the domain's ranks it hosts and who of
// them is parked. While it hosts every rank, nobody outside can notify
// (a notifier must map the windows, so it is a rank), and a waiter parks
// on a Go channel that Notify reaches after its atomic store: a goroutine
// wake-up, no system call. Each park is bounded by futex.MaxSleep, after
// which the waiter re-checks, so a plain store (or a stray store from
// elsewhere) is still noticed within a few milliseconds, as before. A
// domain with a rank in another process keeps the futex path, and Notify
// wakes both kinds.
//
// No wake-up is lost: a waiter counts itself (parked) before it checks
// its condition, and Notify reads the count after its store; with
// sequentially consistent atomics on both sides either the notifier sees
// the waiter or the waiter sees the store. The channel holds one token, so
// a wake that comes between the check and the park is not missed.

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"simpler/internal/futex"
	"simpler/internal/halt"
)

// wakeSpin is how many times a parked-capable waiter re-checks, yielding
// to the other goroutines, before it parks: a hand-off within a few
// scheduler rounds is seen without a park.
const wakeSpin = 8

// wakeHeader is one mapped header's registry entry.
type wakeHeader struct {
	refs   int          // attached ranks of this process; guarded by wakeMu
	hosted atomic.Int32 // the same, read lock-free by waiters
	size   int32        // the domain's ranks
	ranks  []wakeRank
}

// wakeRank is the goroutines parked on one rank's signal word.
type wakeRank struct {
	parked atomic.Int32
	mu     sync.Mutex
	list   []*waiter
}

// waiter is one parked goroutine's channel and timer, pooled.
type waiter struct {
	ch chan struct{}
	t  *time.Timer
}

var (
	wakeMu  sync.Mutex
	wakeReg = map[uintptr]*wakeHeader{}

	waiterPool = sync.Pool{New: func() any {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return &waiter{ch: make(chan struct{}, 1), t: t}
	}}
)

func hdrKey(hdr []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(hdr))) }

// wakeAttach counts a rank of size ranks that maps hdr in this process.
func wakeAttach(hdr []byte, size int) {
	wakeMu.Lock()
	defer wakeMu.Unlock()
	h := wakeReg[hdrKey(hdr)]
	if h == nil || int(h.size) != size {
		// A different size means a recycled mapping whose old ranks
		// still hold it: theirs stays reachable from their views.
		h = &wakeHeader{size: int32(size), ranks: make([]wakeRank, size)}
		wakeReg[hdrKey(hdr)] = h
	}
	h.refs++
	h.hosted.Store(int32(h.refs))
}

// wakeDetach undoes one wakeAttach.
func wakeDetach(hdr []byte) {
	wakeMu.Lock()
	defer wakeMu.Unlock()
	h := wakeReg[hdrKey(hdr)]
	if h == nil {
		return
	}
	h.refs--
	h.hosted.Store(int32(h.refs))
	if h.refs <= 0 {
		delete(wakeReg, hdrKey(hdr))
	}
}

// wakeLookup is hdr's entry if a rank of this process attached it.
func wakeLookup(hdr []byte, size int) *wakeHeader {
	wakeMu.Lock()
	defer wakeMu.Unlock()
	if h := wakeReg[hdrKey(hdr)]; h != nil && int(h.size) == size {
		return h
	}
	return nil
}

// local reports whether this process hosts every rank of the domain.
func (h *wakeHeader) local() bool { return h != nil && h.hosted.Load() == h.size }

// wake wakes the goroutines parked on rank's word.
func (h *wakeHeader) wake(rank int) {
	r := &h.ranks[rank]
	if r.parked.Load() == 0 {
		return
	}
	r.mu.Lock()
	for _, w := range r.list {
		select {
		case w.ch <- struct{}{}:
		default: // a token is already there
		}
	}
	r.mu.Unlock()
}

// parkUntil returns true once ready() holds, false once timeout has
// passed: it spins a few scheduler rounds, then parks on rank's word,
// woken by wake or by stop firing, each park at most futex.MaxSleep. The
// clock is read only once the spin is over (most hand-offs end in it), so
// timeout counts from there: a few scheduler rounds late. ready must hold
// once stop has fired (WaitStop's does), for a park that stop ends to
// return.
func (h *wakeHeader) parkUntil(rank int, timeout time.Duration, ready func() bool, stop *halt.Signal) bool {
	for i := 0; i < wakeSpin; i++ {
		if ready() {
			return true
		}
		runtime.Gosched()
	}
	deadline := time.Now().Add(timeout)
	r := &h.ranks[rank]
	w := waiterPool.Get().(*waiter)
	r.mu.Lock()
	r.list = append(r.list, w)
	r.mu.Unlock()
	r.parked.Add(1)
	defer func() {
		r.parked.Add(-1)
		r.mu.Lock()
		for i, x := range r.list {
			if x == w {
				r.list[i] = r.list[len(r.list)-1]
				r.list = r.list[:len(r.list)-1]
				break
			}
		}
		r.mu.Unlock()
		select {
		case <-w.ch: // drop a late token before the waiter is reused
		default:
		}
		waiterPool.Put(w)
	}()
	stopped := stop.Done() // nil, never ready, for no signal
	for {
		if ready() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		w.t.Reset(min(left, futex.MaxSleep))
		select {
		case <-w.ch:
		case <-w.t.C:
		case <-stopped:
		}
		w.t.Stop()
	}
}

// wakeLen is how many headers the registry holds (leak checks).
func wakeLen() int {
	wakeMu.Lock()
	defer wakeMu.Unlock()
	return len(wakeReg)
}
