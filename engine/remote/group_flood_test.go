package remote

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"simpler/engine"
	"simpler/wire"
)

// A flood of bare connections from 127.0.0.2 at a group's listener drops
// only its own (pendingConns, as the daemon's): two ranks started by the
// test join from 127.0.0.1 while it goes on, and init succeeds. (Before,
// the listener dropped its oldest waiting connection whatever its
// address, so a flood turned joining ranks away.)
func TestGroupJoinsDuringAFloodFromAnotherAddress(t *testing.T) {
	const ranks = 2
	gt := newGroupTest(t, engine.GroupSpec{Ranks: ranks, Launcher: engine.LauncherNone}, engine.Config{StartupTimeout: 20 * time.Second})
	f := &flood{stop: make(chan struct{})}
	gt.start = func(addr, tokenFile string) {
		f.wg.Add(1)
		go func() { // the listener accepts once this returns
			defer f.wg.Done()
			// Fill the flood's share three times over first: the listener
			// keeps the newest of them, its bound for one address, and the
			// ranks arrive while it is at that bound.
			bound := pendingJoinBound(ranks)
			if err := f.open(addr, 3*bound); err != nil {
				t.Error(err)
			}
			if open, want := f.stillOpen(), newPendingConns(bound).perAddr; open != want {
				t.Errorf("the listener holds %d of 127.0.0.2's %d bare connections; want its bound for one address, %d", open, 3*bound, want)
			}
			for r := range ranks {
				gt.startRank(addr, tokenFile, r, nil)
			}
			var flooders sync.WaitGroup
			for range 2 {
				flooders.Add(1)
				go func() {
					defer flooders.Done()
					f.run(addr)
				}()
			}
			flooders.Wait()
		}()
	}
	start := time.Now()
	err := gt.w.Init()
	close(f.stop)
	f.wg.Wait()
	f.close()
	if err != nil {
		gt.w.Close()
		t.Fatalf("init during a flood from 127.0.0.2: %v", err)
	}
	t.Logf("init took %v; the flood made %d connections", time.Since(start), f.made)
	if err := gt.w.Close(); err != nil {
		t.Fatal(err)
	}
}

// flood opens bare connections from 127.0.0.2 that never send a JOIN.
type flood struct {
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
	made  int
}

// open makes n connections, each having read its CHALLENGE: the listener
// has counted it by then.
func (f *flood) open(addr string, n int) error {
	dialer := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: deadline}
	for range n {
		c, err := dialer.Dial("tcp", addr)
		if err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(deadline))
		if _, _, err := wire.ReadFrame(c, wire.TypeChallenge.MaxPayload()); err != nil {
			c.Close()
			return err
		}
		f.mu.Lock()
		f.conns = append(f.conns, c)
		f.made++
		f.mu.Unlock()
	}
	return nil
}

// run opens connections as fast as it can until stop, not waiting for
// their CHALLENGE, keeping the newest few hundred.
func (f *flood) run(addr string) {
	dialer := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: deadline}
	for {
		select {
		case <-f.stop:
			return
		default:
		}
		c, err := dialer.Dial("tcp", addr)
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				return // the listener closed: every rank is in
			}
			continue // out of ports for a moment
		}
		f.mu.Lock()
		f.conns = append(f.conns, c)
		f.made++
		f.mu.Unlock()
		f.trim(256)
	}
}

// stillOpen counts the connections the listener has not dropped: a
// dropped one reads EOF after its CHALLENGE, an open one times out.
func (f *flood) stillOpen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	open := 0
	var b [1]byte
	for _, c := range f.conns {
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(b[:]); !errors.Is(err, io.EOF) {
			open++
		}
	}
	return open
}

// trim closes all but the newest n connections (the client's own
// descriptors are bounded too).
func (f *flood) trim(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.conns) > n {
		f.conns[0].Close()
		f.conns = f.conns[1:]
	}
}

func (f *flood) close() { f.trim(0) }
