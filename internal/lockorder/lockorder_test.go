package lockorder_test

import (
	"strings"
	"sync"
	"testing"

	"simpler/internal/leakcheck"
	"simpler/internal/lockorder"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

var (
	outer = lockorder.Rank{Order: 1, Name: "outer"}
	inner = lockorder.Rank{Order: 2, Name: "inner"}
)

// panics runs f and returns what it panicked with ("" if nothing).
func panics(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = r.(string)
		}
	}()
	f()
	return ""
}

func TestOrderIsChecked(t *testing.T) {
	a, b := &lockorder.Mutex{Rank: outer}, &lockorder.Mutex{Rank: inner}
	if msg := panics(func() { a.Lock(); b.Lock(); b.Unlock(); a.Unlock() }); msg != "" {
		t.Fatalf("the right order panicked: %s", msg)
	}
	msg := panics(func() {
		b.Lock()
		defer b.Unlock()
		a.Lock() // wrong: outer under inner
		a.Unlock()
	})
	switch {
	case !lockorder.Enabled && msg != "":
		t.Fatalf("a build without the checks panicked: %s", msg)
	case lockorder.Enabled && !strings.Contains(msg, "outer (rank 1) taken while holding inner (rank 2)"):
		t.Fatalf("the wrong order gave %q", msg)
	}
	// The failed Lock registered nothing: a is free and takes the right order again.
	if msg := panics(func() { a.Lock(); b.Lock(); b.Unlock(); a.Unlock() }); msg != "" {
		t.Fatalf("after a refusal: %s", msg)
	}
}

func TestEqualRanksNestAndGoroutinesAreSeparate(t *testing.T) {
	p, c := &lockorder.Mutex{Rank: inner}, &lockorder.Mutex{Rank: inner}
	if msg := panics(func() { p.Lock(); c.Lock(); c.Unlock(); p.Unlock() }); msg != "" {
		t.Fatalf("equal ranks: %s", msg)
	}
	// Another goroutine holding inner does not constrain this one.
	b, a := &lockorder.Mutex{Rank: inner}, &lockorder.RWMutex{Rank: outer}
	b.Lock()
	var wg sync.WaitGroup
	wg.Add(1)
	var msg string
	go func() {
		defer wg.Done()
		msg = panics(func() { a.RLock(); a.RUnlock() })
	}()
	wg.Wait()
	b.Unlock()
	if msg != "" {
		t.Fatalf("another goroutine's lock counted: %s", msg)
	}
}

func TestUnlockByAnotherGoroutine(t *testing.T) {
	m, o := &lockorder.Mutex{Rank: inner}, &lockorder.Mutex{Rank: outer}
	m.Lock()
	done := make(chan struct{})
	go func() { m.Unlock(); close(done) }()
	<-done
	if msg := panics(func() { o.Lock(); o.Unlock() }); msg != "" {
		t.Fatalf("a lock released elsewhere still counted: %s", msg)
	}
}

func TestIOUnderANoIOLockIsRefused(t *testing.T) {
	quiet, noio := &lockorder.Mutex{Rank: outer}, &lockorder.Mutex{Rank: lockorder.Rank{Order: 3, Name: "worker", NoIO: true}}
	quiet.Lock()
	if msg := panics(func() { lockorder.IO("a futex sleep") }); msg != "" {
		t.Fatalf("I/O under a lock that allows it: %s", msg)
	}
	quiet.Unlock()
	noio.Lock()
	msg := panics(func() { lockorder.IO("a futex sleep") })
	noio.Unlock()
	switch {
	case !lockorder.Enabled && msg != "":
		t.Fatalf("a build without the checks panicked: %s", msg)
	case lockorder.Enabled && msg != "lock order: a futex sleep while holding worker, which is never held across I/O":
		t.Fatalf("I/O under a NoIO lock gave %q", msg)
	}
	if msg := panics(func() { lockorder.IO("after") }); msg != "" {
		t.Fatalf("I/O after the lock was released: %s", msg)
	}
}
