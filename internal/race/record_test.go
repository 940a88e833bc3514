package race

import (
	"bytes"
	"strings"
	"testing"
)

// record runs steps on a recorder and returns its decoded log, as the
// parent gets it.
func record(t *testing.T, steps func(c *Ctx)) *RecordedLog {
	t.Helper()
	c := NewRecorder(PrivateTag(1))
	steps(c)
	l, err := DecodeLog(c.Log())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestReplayOrdersAWaitAfterTheNotifyItSaw(t *testing.T) {
	for _, tc := range []struct {
		name string
		word uintptr
		racy bool
	}{{"right word", 0x200, false}, {"one word off", 0x204, true}} {
		t.Run(tc.name, func(t *testing.T) {
			// Member 0 waits, then reads member 1's data; member 1 writes
			// it, then notifies. Replayed in member order, the wait must
			// still come after the notify it observed.
			waiter := record(t, func(c *Ctx) {
				c.Waited(tc.word, 4, 1, "comm.wait", at("p.star:3:1"))
				c.Access(0x100, 8, Read, "read", at("p.star:4:1"))
			})
			notifier := record(t, func(c *Ctx) {
				c.Access(0x100, 8, Write, "write", at("p.star:1:1"))
				c.Notify(0x200, 4, false, 1, "comm.notify", at("p.star:2:1"), func() (int64, error) { return 1, nil })
			})
			var out strings.Builder
			d := New(&out)
			a, b := two(d)
			d.Replay([]*Ctx{a, b}, []*RecordedLog{waiter, notifier})
			if racy := d.Races() > 0; racy != tc.racy {
				t.Fatalf("racy %v, want %v:\n%s", racy, tc.racy, out.String())
			}
		})
	}
}

func TestReplayBarrierWaitsForEveryArrival(t *testing.T) {
	logs := []*RecordedLog{
		record(t, func(c *Ctx) { // reads what rank 1 wrote before the barrier
			c.Leave("d", c.Arrive("d", 0, 2))
			c.Access(0x300, 8, Read, "read", at("b.star:5:1"))
		}),
		record(t, func(c *Ctx) {
			c.Access(0x300, 8, Write, "write", at("b.star:2:1"))
			c.Leave("d", c.Arrive("d", 1, 2))
		}),
	}
	var out strings.Builder
	d := New(&out)
	a, b := two(d)
	d.Replay([]*Ctx{a, b}, logs)
	if d.Races() != 0 {
		t.Fatalf("a barrier-ordered pair raced:\n%s", out.String())
	}
}

func TestRecorderKeysPrivateMemoryByItsProcess(t *testing.T) {
	l := record(t, func(c *Ctx) { c.Access(0x1234, 8, Write, "write", nil) })
	if got, want := l.events[0].key, PrivateTag(1)|0x1234; got != want {
		t.Fatalf("key %#x, want %#x", got, want)
	}
}

func TestLogBoundAndCutNotice(t *testing.T) {
	c := NewRecorder(PrivateTag(2))
	for i := 0; i < maxLogEvents+10; i++ {
		c.Access(uintptr(i*8), 8, Write, "write", at("c.star:1:1"))
	}
	l, err := DecodeLog(c.Log())
	if err != nil || !l.Truncated || len(l.events) > maxLogEvents || len(c.Log()) > maxLogBytes+64 {
		t.Fatalf("err %v, truncated %v, %d events", err, l != nil && l.Truncated, len(l.events))
	}
	var out strings.Builder
	d := New(&out)
	a := d.Start(Who{Desc: "task 1"})
	d.Replay([]*Ctx{a}, []*RecordedLog{l})
	if !strings.Contains(out.String(), "was cut at its bound") {
		t.Fatalf("no notice:\n%s", out.String())
	}
}

func TestDecodeLogRefusesWhatItCannotTrust(t *testing.T) {
	c := NewRecorder(PrivateTag(1))
	c.Access(0x10, 8, Read, "read", at("f.star:1:1"))
	b := c.Log()
	for _, bad := range [][]byte{nil, {9}, b[:len(b)-1], append(bytes.Clone(b), 0), {logVersion, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}} {
		if _, err := DecodeLog(bad); err == nil {
			t.Errorf("accepted %x", bad)
		}
	}
}

func FuzzDecodeLog(f *testing.F) {
	c := NewRecorder(PrivateTag(1))
	c.Access(0x10, 8, Read, "read", at("f.star:1:1"))
	c.Notify(0x20, 4, true, 1, "comm.notify", nil, func() (int64, error) { return 3, nil })
	c.Waited(0x20, 4, 3, "comm.wait", nil)
	c.Leave("d", c.Arrive("d", 0, 2))
	c.SetRank("rank 0")
	f.Add(c.Log())
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeLog(b)
		if err != nil {
			return
		}
		// Whatever decodes replays without panicking.
		d := New(nil)
		d.Replay([]*Ctx{d.Start(Who{})}, []*RecordedLog{l})
	})
}

// Two tasks in two processes (two nodes' ranks of one global domain)
// each wait for the other's notify: each replay holds its wait until the
// other's replay brings the notify, and neither reports a race.
func TestReplaysOfTwoTasksWaitForEachOthersNotifies(t *testing.T) {
	notify := func(c *Ctx, key uintptr, pos string) {
		c.Notify(key, 4, false, 1, "comm.notify", at(pos), func() (int64, error) { return 1, nil })
	}
	a := record(t, func(c *Ctx) {
		c.Access(0x1000, 8, Write, "write", at("g.star:1:1"))
		notify(c, 0x2000, "g.star:2:1")
		c.Waited(0x3000, 4, 1, "comm.wait", at("g.star:3:1"))
		c.Access(0x4000, 8, Read, "read", at("g.star:4:1"))
	})
	b := record(t, func(c *Ctx) {
		c.Access(0x4000, 8, Write, "write", at("g.star:5:1"))
		notify(c, 0x3000, "g.star:6:1")
		c.Waited(0x2000, 4, 1, "comm.wait", at("g.star:7:1"))
		c.Access(0x1000, 8, Read, "read", at("g.star:8:1"))
	})
	var out strings.Builder
	d := New(&out)
	ca, cb := two(d)
	d.Recording(2)
	done := make(chan struct{})
	go func() {
		d.Replay([]*Ctx{ca}, []*RecordedLog{a})
		close(done)
	}()
	d.Replay([]*Ctx{cb}, []*RecordedLog{b})
	<-done
	if d.Races() != 0 {
		t.Fatalf("races:\n%s", out.String())
	}
}
