package race

import (
	"fmt"
	"sort"
	"strings"
)

// Wait is what a blocked context waits in: a comm.barrier round, a
// comm.wait on a signal word, or (Park) a run or a drain.
type Wait struct {
	// A barrier: the round Arrive returned, of the domain Domain (its
	// allocation id Dom), as this rank of Size.
	Barrier bool
	Dom     string
	Round   int
	Domain  string
	Rank    int
	Size    int

	// A signal: the word at Addr (Width bytes), waited for until it holds
	// Cmp Value. Load reads it now; Holds says whether a value ends the
	// wait.
	Addr  uintptr
	Width int
	Value int64
	Cmp   string
	Load  func() int64
	Holds func(int64) bool

	// Passed, for a barrier, tells whether the barrier itself has passed
	// the round: ranks the detector cannot see (on a remote node) arrive
	// there too.
	Passed func() bool

	// Park: the orchestration (or a level-4 task) waits for a run.
	Park string

	St   Stack
	Stop func(reason string) // ends the wait with reason (a kernel's halt signal)

	reported bool
}

// Block records that c waits in w; Unblock that it stopped waiting. When
// every live context is blocked, and nothing is queued to run, the
// detector checks whether any wait could still end; if none can, it
// reports the deadlock and stops every waiting kernel.
func (c *Ctx) Block(w *Wait) {
	if c.rec != nil {
		return // the parent sees this wait's process as running
	}
	w.Addr = canon(w.Addr, 0)
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.wait == nil {
		d.blocked++
	}
	c.wait = w
	d.waiting[c] = struct{}{}
	d.checkDeadlock()
}

// Unblock records that c's wait ended.
func (c *Ctx) Unblock() {
	if c.rec != nil {
		return
	}
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.wait != nil {
		c.wait = nil
		d.blocked--
		delete(d.waiting, c)
	}
}

// Queue counts n more (or, negative, fewer) assignments handed to
// endpoints that have not started, or that run where this detector cannot
// see (another process, a remote node): while any is, nothing is stuck.
func (d *Detector) Queue(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queued += n
	if n < 0 {
		d.checkDeadlock()
	}
}

// checkDeadlock reports a deadlock if every live context waits, nothing
// is queued, at least one waits in a kernel's comm call, and no wait's
// condition holds already (a wait that is about to wake is not stuck).
func (d *Detector) checkDeadlock() {
	if d.live == 0 || d.blocked < d.live || d.queued > 0 {
		return
	}
	var stuck []*Ctx
	for c := range d.waiting {
		w := c.wait
		if w.Park != "" {
			continue
		}
		if w.reported || d.canEnd(w) {
			return
		}
		stuck = append(stuck, c)
	}
	if len(stuck) == 0 {
		return
	}
	sort.Slice(stuck, func(i, j int) bool { return stuck[i].id < stuck[j].id })
	var b strings.Builder
	b.WriteString("==================\nDEADLOCK: every kernel that runs waits, and nothing left to run could wake one\n")
	summary := make([]string, len(stuck))
	for i, c := range stuck {
		line := d.waitLine(c.wait)
		summary[i] = fmt.Sprintf("rank %d %s", c.wait.Rank, line)
		fmt.Fprintf(&b, "%s\n  %s\n", c.desc(), line)
		writeStack(&b, c.wait.St)
	}
	b.WriteString("==================\n")
	d.emit(b.String())
	reason := "RuntimeError: deadlock: " + strings.Join(summary, "; ")
	for _, c := range stuck {
		c.wait.reported = true
		if c.wait.Stop != nil {
			c.wait.Stop(reason)
		}
	}
}

// canEnd reports whether w's condition already holds.
func (d *Detector) canEnd(w *Wait) bool {
	if w.Barrier {
		b := d.bars[barrierKey{w.Dom, w.Round}]
		return b == nil || b.count == len(b.arrived) || w.Passed != nil && w.Passed()
	}
	return w.Holds != nil && w.Load != nil && w.Holds(w.Load())
}

// waitLine says what w waits for, and what is missing.
func (d *Detector) waitLine(w *Wait) string {
	if w.Barrier {
		var missing []string
		if b := d.bars[barrierKey{w.Dom, w.Round}]; b != nil {
			for r, ok := range b.arrived {
				if !ok {
					missing = append(missing, fmt.Sprint(r))
				}
			}
		}
		return fmt.Sprintf("waits in comm.barrier() #%d of domain %q (%d ranks); not arrived: rank(s) %s",
			w.Round+1, w.Domain, w.Size, strings.Join(missing, ", "))
	}
	seen := int64(0)
	if w.Load != nil {
		seen = w.Load()
	}
	last := "no notify wrote it"
	if s := d.signals[w.Addr]; s != nil && len(s.hist) > 0 {
		h := s.hist[len(s.hist)-1]
		last = fmt.Sprintf("last notified to %d by %s", h.value, h.by.desc())
	}
	return fmt.Sprintf("waits in comm.wait() on %s until it is %s %d; it holds %d, %s",
		d.where(w.Addr, w.Addr+uintptr(w.Width)), w.Cmp, w.Value, seen, last)
}

// Park records that c waits for a run (what, for a report) until Unblock.
func (c *Ctx) Park(what string) { c.Block(&Wait{Park: what}) }
