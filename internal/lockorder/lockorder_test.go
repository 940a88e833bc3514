package lockorder

import (
	"strings"
	"sync"
	"testing"

	"simpler/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

var (
	outer = Rank{1, "outer"}
	inner = Rank{2, "inner"}
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
	a, b := &Mutex{Rank: outer}, &Mutex{Rank: inner}
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
	case !Enabled && msg != "":
		t.Fatalf("a build without the checks panicked: %s", msg)
	case Enabled && !strings.Contains(msg, "outer (rank 1) taken while holding inner (rank 2)"):
		t.Fatalf("the wrong order gave %q", msg)
	}
	// The failed Lock registered nothing: a is free and takes the right order again.
	if msg := panics(func() { a.Lock(); b.Lock(); b.Unlock(); a.Unlock() }); msg != "" {
		t.Fatalf("after a refusal: %s", msg)
	}
}

func TestEqualRanksNestAndGoroutinesAreSeparate(t *testing.T) {
	p, c := &Mutex{Rank: inner}, &Mutex{Rank: inner}
	if msg := panics(func() { p.Lock(); c.Lock(); c.Unlock(); p.Unlock() }); msg != "" {
		t.Fatalf("equal ranks: %s", msg)
	}
	// Another goroutine holding inner does not constrain this one.
	b, a := &Mutex{Rank: inner}, &RWMutex{Rank: outer}
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
	m, o := &Mutex{Rank: inner}, &Mutex{Rank: outer}
	m.Lock()
	done := make(chan struct{})
	go func() { m.Unlock(); close(done) }()
	<-done
	if msg := panics(func() { o.Lock(); o.Unlock() }); msg != "" {
		t.Fatalf("a lock released elsewhere still counted: %s", msg)
	}
}
