package race

import (
	"fmt"
	"time"
)

// Replay checks what the members of one task recorded in other processes
// (logs[i] is what ctxs[i] did) as though they had run here, in an order
// their synchronisation allows: a wait's observation is replayed after
// the notify that left its value, a barrier's departure after every
// rank's arrival. So the report is the one thread mode gives for the
// same program. Replay runs once every member has ended, before their
// end clocks are taken.
//
// A wait may have seen a notify of another task whose log has not come
// yet (two nodes' ranks of one global domain): while other recorded
// members are in flight (Recording), a wait whose notify is unknown holds
// its member's replay, and the others' replays wake it as they go. Past
// replayPatience without progress it goes on, acquiring nothing.
func (d *Detector) Replay(ctxs []*Ctx, logs []*RecordedLog) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := &replay{d: d, logs: logs, pos: make([]int, len(logs)), rounds: make([]map[string]int, len(logs)), own: len(ctxs)}
	for i := range r.rounds {
		r.rounds[i] = map[string]int{}
		if logs[i].Truncated && !d.cut {
			d.cut = true
			d.emit(fmt.Sprintf("simpler: --race: the access log of %s was cut at its bound (%d events): what it did past that was not checked\n", ctxs[i].desc(), maxLogEvents))
		}
	}
	deadline := time.Now().Add(replayPatience)
	for r.left() {
		if r.pass(ctxs) {
			d.replayed.Broadcast() // its notifies may be what another replay waits for
			deadline = time.Now().Add(replayPatience)
			continue
		}
		if r.othersMayAdd() && time.Now().Before(deadline) {
			wake := time.AfterFunc(time.Until(deadline), d.replayed.Broadcast)
			d.replayed.Wait()
			wake.Stop()
			continue
		}
		if !r.impatient && r.othersMayAdd() {
			r.impatient = true // go on without the notifies that did not come
			continue
		}
		r.force(ctxs) // nothing may go by the rules (a log was cut): take the first step left
	}
	d.recording -= len(ctxs)
	d.replayed.Broadcast()
}

// replayPatience bounds how long a replay waits, without progress, for a
// notify another member's log may bring.
const replayPatience = 500 * time.Millisecond

// Recording counts n more (or, negative, fewer) members running in other
// processes whose logs will be replayed.
func (d *Detector) Recording(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.recording += n
}

// replay is the state of one Replay: where each member's log is, and the
// barrier round each member's last arrival got, by domain.
type replay struct {
	d         *Detector
	logs      []*RecordedLog
	pos       []int
	rounds    []map[string]int
	own       int  // members of this replay, counted in d.recording
	impatient bool // waited past replayPatience: unknown notifies stay unknown
}

// othersMayAdd reports whether members outside this replay are still to
// be replayed, whose notifies may end a wait of this one.
func (r *replay) othersMayAdd() bool { return r.d.recording > r.own }

func (r *replay) left() bool {
	for i, l := range r.logs {
		if r.pos[i] < len(l.events) {
			return true
		}
	}
	return false
}

// pass replays, member by member, every step that may go now, and
// reports whether any did.
func (r *replay) pass(ctxs []*Ctx) bool {
	moved := false
	for i, l := range r.logs {
		for r.pos[i] < len(l.events) && r.ready(i, &l.events[r.pos[i]]) {
			r.step(ctxs[i], i, &l.events[r.pos[i]])
			r.pos[i]++
			moved = true
		}
	}
	return moved
}

func (r *replay) force(ctxs []*Ctx) {
	for i, l := range r.logs {
		if r.pos[i] < len(l.events) {
			r.step(ctxs[i], i, &l.events[r.pos[i]])
			r.pos[i]++
			return
		}
	}
}

// ready reports whether member i's next step e may be replayed now.
func (r *replay) ready(i int, e *event) bool {
	switch e.kind {
	case evWaited:
		if r.d.notifyOf(e.key, e.value) != nil {
			return true
		}
		return !r.pendingNotify(i, e.key, e.value) && (r.impatient || !r.othersMayAdd())
	case evNotify:
		// An add follows the notify that left the value it added to: the
		// adds of a word replay in the order they happened.
		return !e.add || !r.pendingNotify(i, e.key, e.value-e.operand)
	case evLeave:
		b := r.d.bars[barrierKey{e.dom, r.rounds[i][e.dom]}]
		return b == nil || b.count == len(b.arrived)
	}
	return true
}

// pendingNotify reports whether a member other than i has yet to replay a
// notify that leaves v in the word at key.
func (r *replay) pendingNotify(i int, key uintptr, v int64) bool {
	for j, l := range r.logs {
		if j == i {
			continue
		}
		for _, e := range l.events[r.pos[j]:] {
			if e.kind == evNotify && e.key == key && e.value == v {
				return true
			}
		}
	}
	return false
}

func (r *replay) step(c *Ctx, i int, e *event) {
	d := r.d
	switch e.kind {
	case evAccess:
		d.access(c, e.key, e.key+uintptr(e.n), e.k, e.op, e.st)
	case evNotify:
		d.notified(c, e.key, e.width, e.add, e.value, e.op, e.st)
	case evWaited:
		d.waited(c, e.key, e.width, e.value, e.op, e.st)
	case evArrive:
		r.rounds[i][e.dom] = d.arrive(c, e.dom, e.rank, e.size)
	case evLeave:
		d.leave(c, e.dom, r.rounds[i][e.dom])
	case evRank:
		if c.rank == "" {
			c.rank = e.desc
		}
	}
}
