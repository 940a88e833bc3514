package proc

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"time"

	"simpler/engine"
	"simpler/hal/shm"
	"simpler/internal/futex"
)

// A mailbox is the shared memory between a parent and one child process:
// a header, then lanes. Each lane carries one request at a time, from the
// parent to the child, and its reply back; a task lane and a control lane
// let a chip answer malloc or copy_to while a kernel runs.
//
// Layout (little-endian):
//
//	header, 64 bytes: magic "SMPLMBOX" (8), version (4), lanes (4),
//	    area size (4), ready (4, the child sets it to 1), gone (4, the
//	    child's last act)
//	lane i at 64 + i*laneSize: reqSeq (4), respSeq (4), reqSleepers (4),
//	    respSleepers (4), reqLen (4), respLen (4), pad to 64,
//	    request area, reply area (each areaSize bytes)
const (
	mboxMagic   = "SMPLMBOX"
	mboxVersion = 1
	mboxHeader  = 64
	laneHeader  = 64

	laneTask    = 0
	laneControl = 1
	mboxLanes   = 2

	// mboxArea bounds one message; bulk data never travels in the
	// mailbox (host memory is shared), so requests are small.
	mboxArea = 1 << 20
)

func laneSize() int { return laneHeader + 2*mboxArea }

type lane struct {
	reqSeq, respSeq, reqSleep, respSleep, reqLen, respLen *uint32
	req, resp                                             []byte
	sent                                                  uint32 // parent: requests sent; child: requests served
}

type mailbox struct {
	seg   *shm.Segment
	ready *uint32
	gone  *uint32
	lanes [mboxLanes]*lane
}

func mailboxSize() int { return mboxHeader + mboxLanes*laneSize() }

// newMailbox creates a mailbox object for a child.
func newMailbox() (*mailbox, error) {
	seg, err := shm.Create("mbox", mailboxSize())
	if err != nil {
		return nil, err
	}
	m := layoutMailbox(seg)
	writeMailboxHeader(seg.Mem)
	return m, nil
}

// writeMailboxHeader writes the layout words of a mailbox header (the
// child's ready and gone words stay as they are).
func writeMailboxHeader(b []byte) {
	copy(b, mboxMagic)
	binary.LittleEndian.PutUint32(b[8:], mboxVersion)
	binary.LittleEndian.PutUint32(b[12:], mboxLanes)
	binary.LittleEndian.PutUint32(b[16:], mboxArea)
}

// checkMailboxHeader checks the layout words of a mailbox header another
// process wrote: this version's magic, version, lanes and area size.
func checkMailboxHeader(b []byte) error {
	le := binary.LittleEndian
	if len(b) < mboxHeader || string(b[:8]) != mboxMagic || le.Uint32(b[8:]) != mboxVersion ||
		le.Uint32(b[12:]) != mboxLanes || le.Uint32(b[16:]) != mboxArea {
		return errors.New("an unknown layout (a different simpler version?)")
	}
	return nil
}

// openMailbox maps a mailbox made by the parent and checks its header.
func openMailbox(name string) (*mailbox, error) {
	seg, err := shm.Open(name, mailboxSize())
	if err != nil {
		return nil, err
	}
	if err := checkMailboxHeader(seg.Mem); err != nil {
		seg.Close()
		return nil, engine.Errorf(engine.RuntimeError, "mailbox %s has %v", name, err)
	}
	return layoutMailbox(seg), nil
}

// laneBytes is the first n bytes of a lane's area, n being a length word
// the other process wrote: a length beyond the area (a corrupt or hostile
// peer) is an error, not a slice past the area's end.
func laneBytes(area []byte, n uint32, what string) ([]byte, error) {
	if uint64(n) > uint64(len(area)) {
		return nil, engine.Errorf(engine.RuntimeError, "%s of %d bytes exceeds the mailbox's %d", what, n, len(area))
	}
	return area[:n], nil
}

func layoutMailbox(seg *shm.Segment) *mailbox {
	b := seg.Mem
	m := &mailbox{seg: seg, ready: futex.Word32(b, 20), gone: futex.Word32(b, 24)}
	for i := range m.lanes {
		base := mboxHeader + i*laneSize()
		l := &lane{
			reqSeq: futex.Word32(b, base), respSeq: futex.Word32(b, base+4),
			reqSleep: futex.Word32(b, base+8), respSleep: futex.Word32(b, base+12),
			reqLen: futex.Word32(b, base+16), respLen: futex.Word32(b, base+20),
		}
		l.req = b[base+laneHeader : base+laneHeader+mboxArea]
		l.resp = b[base+laneHeader+mboxArea : base+laneHeader+2*mboxArea]
		m.lanes[i] = l
	}
	return m
}

// pollEvery is how often a waiting parent looks at the child's health
// between wake-ups, and how often an idle child looks at its parent.
const pollEvery = 50 * time.Millisecond

// call sends req on l and waits for the reply. alive reports why the child
// can no longer answer (it exited, say); the wait ends with that error, or
// a TimeoutError at the deadline (zero: none). Calls on one lane must not
// overlap.
func (l *lane) call(req []byte, deadline time.Time, alive func() error) ([]byte, error) {
	if len(req) > mboxArea {
		return nil, engine.Errorf(engine.ValueError, "message of %d bytes exceeds the mailbox's %d", len(req), mboxArea)
	}
	copy(l.req, req)
	atomic.StoreUint32(l.reqLen, uint32(len(req)))
	l.sent++
	want := l.sent
	futex.Signal(l.reqSeq, l.reqSleep)
	answered := func() bool { return atomic.LoadUint32(l.respSeq) == want }
	for {
		until := time.Now().Add(pollEvery)
		if !deadline.IsZero() && deadline.Before(until) {
			until = deadline
		}
		if futex.SleepUntil(l.respSeq, l.respSleep, until, answered) {
			return laneBytes(l.resp, atomic.LoadUint32(l.respLen), "the child's reply")
		}
		if err := alive(); err != nil {
			return nil, err
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return nil, engine.Errorf(engine.TimeoutError, "no reply within the deadline")
		}
	}
}

// next waits in the child for the next request. live is false when stop
// reports a reason to give up (the parent is gone); err is a request whose
// length word is out of bounds, to be answered with that error.
func (l *lane) next(stop func() bool) (req []byte, live bool, err error) {
	want := l.sent + 1
	arrived := func() bool { return atomic.LoadUint32(l.reqSeq) == want }
	for !futex.SleepUntil(l.reqSeq, l.reqSleep, time.Now().Add(pollEvery), arrived) {
		if stop() {
			return nil, false, nil
		}
	}
	l.sent = want
	req, err = laneBytes(l.req, atomic.LoadUint32(l.reqLen), "a request")
	return req, true, err
}

// reply sends the child's answer to the request just taken.
func (l *lane) reply(resp []byte) {
	if len(resp) > mboxArea {
		resp = encodeError(engine.Errorf(engine.RuntimeError, "reply of %d bytes exceeds the mailbox's %d", len(resp), mboxArea))
	}
	copy(l.resp, resp)
	atomic.StoreUint32(l.respLen, uint32(len(resp)))
	futex.Signal(l.respSeq, l.respSleep)
}
