// Package orphan ends processes that outlive their parent. A child
// process or a remote session watches its parent (Watch); when the parent
// is gone, or the process is told to go, the caller's stop function runs
// (it asks the running work to stop and closes what the process serves),
// and whatever has not finished Grace later is cut short: Exit removes the
// process's own shared memory and exits. So a kernel in an endless loop
// never keeps an orphan alive for longer than Grace.
package orphan

import (
	"os"
	"sync"
	"time"

	"simpler/hal/shm"
)

// Grace is how long an orphan's work may take to stop before the process
// ends without it.
const Grace = 2 * time.Second

// pollEvery is how often the parent's pid is looked at.
const pollEvery = 50 * time.Millisecond

// Watch runs stop once, the first time the parent of this process is gone
// or a value arrives on signals (nil: none), and then arms the grace exit.
// It returns a function that ends the watch (the process is ending
// normally).
func Watch(signals <-chan os.Signal, stop func()) (end func()) {
	ppid := os.Getppid()
	done := make(chan struct{})
	var once sync.Once
	go func() {
		tick := time.NewTicker(pollEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-signals:
			case <-tick.C:
				if os.Getppid() == ppid {
					continue
				}
			}
			select {
			case <-done: // ended while the event came in: select picks at random among ready cases
				return
			default:
			}
			Abandon(stop)
			return
		}
	}()
	return func() { once.Do(func() { close(done) }) }
}

// Abandon runs stop and arms the grace exit: the process ends Grace later
// unless it has ended by itself.
func Abandon(stop func()) {
	if stop != nil {
		stop()
	}
	time.AfterFunc(Grace, Exit)
}

// Exit removes the shared memory this process created and exits with
// status 1: the last act of a process that cannot finish its cleanup.
func Exit() {
	shm.RemoveOwn()
	os.Exit(1)
}
