package race

import (
	"strings"
	"sync/atomic"
	"testing"
)

func at(pos string) Stack { return Stack{{Func: "k", Pos: pos}} }

// two starts two task contexts after the orchestration's current clock,
// as two unordered tasks of one run.
func two(d *Detector) (a, b *Ctx) {
	sub := d.Main().Release()
	a = d.Start(Who{Desc: "task 1", Owner: d, Run: 1, Task: 1}, sub)
	b = d.Start(Who{Desc: "task 2", Owner: d, Run: 1, Task: 2}, sub)
	return a, b
}

func TestUnorderedWritesRaceOrderedDoNot(t *testing.T) {
	var out strings.Builder
	d := New(&out)
	d.Name(1000, 64, "host tensor x", true)
	a, b := two(d)
	a.Access(1000, 32, Write, "write", at("f.star:1:1"))
	b.Access(1016, 32, Write, "write", at("f.star:2:1"))
	if d.Races() != 1 {
		t.Fatalf("races = %d, want 1\n%s", d.Races(), out.String())
	}
	for _, want := range []string{"WARNING: DATA RACE", "Write of bytes [16, 32) of host tensor x by task 2", "f.star:2:1", "Previous write of bytes [16, 32)", "f.star:1:1", "no task dependency orders task 2 after task 1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	// c starts after a's end: ordered, no new race.
	c := d.Start(Who{Desc: "task 3", Owner: d, Run: 1, Task: 3}, a.Finish())
	c.Access(1000, 16, Read, "read", at("f.star:3:1"))
	if d.Races() != 1 {
		t.Fatalf("an ordered read raced:\n%s", out.String())
	}
	// Disjoint bytes never race.
	e := d.Start(Who{Desc: "task 4", Owner: d, Run: 1, Task: 4})
	e.Access(1048, 16, Write, "write", at("f.star:4:1"))
	if d.Races() != 1 {
		t.Fatalf("disjoint bytes raced:\n%s", out.String())
	}
}

func TestNoEdgeNoteNamesUpstreamsRule(t *testing.T) {
	var out strings.Builder
	d := New(&out)
	a, b := two(d)
	d.NoEdge(d, 1, 2, 1, "an OUTPUT_EXISTING does not wait for an earlier INPUT")
	a.Access(0x10, 8, Read, "read", at("r.star:1:1"))
	b.Access(0x10, 8, Write, "write", at("r.star:2:1"))
	if d.Races() != 1 || !strings.Contains(out.String(), "no task dependency: an OUTPUT_EXISTING does not wait for an earlier INPUT") {
		t.Fatalf("races %d:\n%s", d.Races(), out.String())
	}
}

func TestNotifyWaitHandOff(t *testing.T) {
	for _, tc := range []struct {
		name     string
		waitWord uintptr
		racy     bool
	}{{"right word", 200, false}, {"one word off", 204, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			d := New(&out)
			a, b := two(d)
			a.Access(100, 8, Write, "write", at("p.star:1:1"))
			var word int64
			if err := a.Notify(200, 4, false, 1, "comm.notify", at("p.star:2:1"), func() (int64, error) { word = 1; return word, nil }); err != nil {
				t.Fatal(err)
			}
			got := int64(0)
			if tc.waitWord == 200 {
				got = word
			}
			b.Waited(tc.waitWord, 4, got, "comm.wait", at("p.star:3:1"))
			b.Access(100, 8, Read, "comm.peer read", at("p.star:4:1"))
			if racy := d.Races() > 0; racy != tc.racy {
				t.Fatalf("racy = %v, want %v:\n%s", racy, tc.racy, out.String())
			}
		})
	}
}

func TestAtomicsRaceOnlyWithPlainAccesses(t *testing.T) {
	var out strings.Builder
	d := New(&out)
	a, b := two(d)
	add := func(c *Ctx, pos string) {
		c.Notify(300, 4, true, 1, "comm.notify", at(pos), func() (int64, error) { return 1, nil })
	}
	add(a, "x.star:1:1")
	add(b, "x.star:2:1")
	if d.Races() != 0 {
		t.Fatalf("two atomic adds raced:\n%s", out.String())
	}
	b.Access(300, 4, Write, "write", at("x.star:3:1")) // a plain reset, unordered with a's add
	if d.Races() != 1 || !strings.Contains(out.String(), "Previous atomic write") {
		t.Fatalf("a plain store did not race with an atomic one: %d\n%s", d.Races(), out.String())
	}
}

func TestBarrierOrdersEveryRank(t *testing.T) {
	for _, withBarrier := range []bool{true, false} {
		var out strings.Builder
		d := New(&out)
		a, b := two(d)
		a.Access(500, 8, Write, "write", at("b.star:1:1"))
		if withBarrier {
			ra, rb := a.Arrive("d", 0, 2), b.Arrive("d", 1, 2)
			a.Leave("d", ra)
			b.Leave("d", rb)
		}
		b.Access(500, 8, Read, "read", at("b.star:2:1"))
		if racy := d.Races() > 0; racy == withBarrier {
			t.Fatalf("barrier %v: racy %v:\n%s", withBarrier, racy, out.String())
		}
	}
}

func TestOneReportPerPairWithACount(t *testing.T) {
	var out strings.Builder
	d := New(&out)
	for i := 0; i < 1000; i++ {
		a, b := two(d)
		a.Access(uintptr(4096+i*8), 8, Write, "write", at("l.star:1:1"))
		b.Access(uintptr(4096+i*8), 8, Read, "read", at("l.star:2:1"))
	}
	if d.Races() != 1 || strings.Count(out.String(), "WARNING: DATA RACE") != 1 {
		t.Fatalf("races %d, reports %d", d.Races(), strings.Count(out.String(), "WARNING"))
	}
	if s := d.Summary(); !strings.Contains(s, "happened 1000 times") || !strings.HasSuffix(s, "found 1 data race(s)") {
		t.Fatalf("summary %q", s)
	}
}

func TestReadHistoryIsBounded(t *testing.T) {
	var out strings.Builder
	d := New(&out)
	sub := d.Main().Release()
	for i := 0; i < 100; i++ {
		d.Start(Who{Desc: "reader", Task: i}, sub).Access(0x40, 8, Read, "read", at("h.star:1:1"))
	}
	if n := len(d.mem.segs); n != 1 || len(d.mem.segs[0].reads) != maxReads {
		t.Fatalf("%d segments, %d reads kept; want 1, %d", n, len(d.mem.segs[0].reads), maxReads)
	}
	d.Start(Who{Desc: "writer", Task: 200}, sub).Access(0x40, 8, Write, "write", at("h.star:2:1"))
	if !strings.Contains(out.String(), "dropped for the history's bound") {
		t.Fatalf("the report does not say history was dropped:\n%s", out.String())
	}
}

func TestUninitializedRead(t *testing.T) {
	var out strings.Builder
	d := New(&out)
	d.Name(0x1000, 256, "run-heap block of task 1", false)
	c := d.Start(Who{Desc: "task 1"}, d.Main().Release())
	c.Access(0x1000, 128, Write, "write", at("u.star:1:1"))
	c.Access(0x1000, 128, Read, "read", at("u.star:2:1"))
	if d.Races() != 0 {
		t.Fatalf("a read of written bytes reported:\n%s", out.String())
	}
	c.Access(0x1040, 128, Read, "read", at("u.star:3:1"))
	if d.Races() != 1 || !strings.Contains(out.String(), "UNINITIALIZED READ\nRead of bytes [128, 192) of run-heap block of task 1") {
		t.Fatalf("uninitialised read: %d\n%s", d.Races(), out.String())
	}
}

func TestQuiesceForgetsWhatWasWaitedFor(t *testing.T) {
	var out strings.Builder
	d := New(&out)
	a, _ := two(d)
	a.Access(0x80, 8, Write, "write", at("q.star:1:1"))
	end := a.Finish()
	a.Exit()
	if len(d.mem.segs) == 0 {
		t.Fatal("no history recorded")
	}
	d.Main().Acquire(end) // the other task is live: nothing forgotten yet
	if len(d.mem.segs) == 0 {
		t.Fatal("history forgotten while a task was live")
	}
	for c := range d.waiting {
		t.Fatalf("%v waits", c)
	}
}

func TestDeadlockReportStopsEveryRank(t *testing.T) {
	var out strings.Builder
	d := New(&out)
	a, b := two(d)
	d.Main().Park("run 1")
	var stopped atomic.Int32
	stop := func(string) { stopped.Add(1) }
	round := a.Arrive("pair", 0, 2)
	a.Block(&Wait{Barrier: true, Dom: "pair", Round: round, Domain: "pair", Rank: 0, Size: 2, St: at("d.star:5:9"), Stop: stop})
	if stopped.Load() != 0 {
		t.Fatal("a deadlock reported while rank 1 still runs")
	}
	var word int64
	b.Block(&Wait{Addr: 0x90, Width: 4, Value: 1, Cmp: ">=", Rank: 1, Load: func() int64 { return word }, Holds: func(v int64) bool { return v >= 1 }, Stop: stop})
	if stopped.Load() != 2 {
		t.Fatalf("%d waits stopped, want 2:\n%s", stopped.Load(), out.String())
	}
	for _, want := range []string{"DEADLOCK", `comm.barrier() #1 of domain "pair" (2 ranks); not arrived: rank(s) 1`, "until it is >= 1; it holds 0, no notify wrote it", "d.star:5:9"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestNoDeadlockWhileAWaitCanEnd(t *testing.T) {
	var out strings.Builder
	d := New(&out)
	a, b := two(d)
	d.Main().Park("run 1")
	word := int64(1) // the notify landed; the waiter has not woken yet
	a.Block(&Wait{Addr: 0x90, Width: 4, Value: 1, Cmp: ">=", Load: func() int64 { return word }, Holds: func(v int64) bool { return v >= 1 }, Stop: func(string) { t.Error("stopped") }})
	b.Finish()
	b.Exit()
	d.Queue(1)
	d.Queue(-1)
	if strings.Contains(out.String(), "DEADLOCK") {
		t.Fatalf("reported:\n%s", out.String())
	}
}
