package starlib

import (
	"sync/atomic"

	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/internal/race"
)

// The race detector (--race) sees a script through its threads: each
// carries the detector's context of the code it runs (the orchestration's
// on every thread a script makes, the task member's on a kernel's thread
// while it runs one), and every builtin that touches memory reports the
// bytes it read or wrote, with the thread's Starlark call stack.

// raceKey is the thread-local holding a thread's *race.Ctx.
const raceKey = "simpler.race"

// racing counts the contexts ever bound in this process: while it is 0
// (no --race), raceOf costs one atomic load, not a thread-local lookup
// per tensor access.
var racing atomic.Int64

func bindRace(th *starlark.Thread, c *race.Ctx) {
	if c != nil {
		racing.Add(1)
		th.SetLocal(raceKey, c)
	} else if racing.Load() != 0 && th.Local(raceKey) != nil {
		th.SetLocal(raceKey, nil)
	}
}

// raceOf is th's context, nil when --race is off.
func raceOf(th *starlark.Thread) *race.Ctx {
	if th == nil || racing.Load() == 0 {
		return nil
	}
	c, _ := th.Local(raceKey).(*race.Ctx)
	return c
}

// stackOf is th's Starlark call stack, innermost call first, without the
// builtins' own frames.
func stackOf(th *starlark.Thread) race.Stack {
	cs := th.CallStack()
	if len(cs) == 0 {
		// a window kernel's Go body: no interpreter frames, its function's
		st, _ := th.Local(nativeFrameKey).(race.Stack)
		return st
	}
	st := make(race.Stack, 0, len(cs))
	for i := len(cs) - 1; i >= 0; i-- {
		f := cs[i]
		if f.Pos.Filename() == "<builtin>" {
			continue
		}
		st = append(st, race.Frame{Func: f.Name, Pos: f.Pos.String()})
	}
	return st
}

// touch reports th's access of kind k to mem, made by op.
func touch(th *starlark.Thread, mem []byte, k race.Kind, op string) {
	c := raceOf(th)
	if c == nil || len(mem) == 0 {
		return
	}
	c.Access(race.Addr(mem), len(mem), k, op, stackOf(th))
}

// touch reports th's access of kind k to span, t's memory from its first
// element, made by op: an atomic one if t is an as_atomic() view. For a
// strided view only the bytes of its elements count (neighbouring column
// blocks of one matrix do not touch), one contiguous run at a time. A
// chip's own memory is keyed by its device address (race.DeviceKey), so
// that a chip's process and the parent agree on it.
func (t *Tensor) touch(th *starlark.Thread, span []byte, k race.Kind, op string) {
	detPoint(op) // under --seed every access is a scheduling point
	rc := raceOf(th)
	if rc == nil || len(span) == 0 {
		return
	}
	if t.atomic {
		switch k {
		case race.Read:
			k = race.AtomicRead
		case race.Write:
			k = race.AtomicWrite
		}
	}
	device := t.t.ChildMemory && !race.Shared(race.Addr(span))
	at := func(lo, hi int) {
		if device {
			if key := rc.DeviceKey(t.t.Addr + uint64(lo)); key != 0 {
				rc.AccessAt(key, hi-lo, k, op, stackOf(th))
				return
			}
		}
		rc.Access(race.Addr(span[lo:]), hi-lo, k, op, stackOf(th))
	}
	if t.t.Strides == nil {
		at(0, len(span))
		return
	}
	for _, r := range elementRuns(t.t) {
		if r[1] <= len(span) {
			at(r[0], r[1])
		}
	}
}

// elementRuns is the byte ranges [lo, hi) of a strided view's elements
// within its span, adjacent elements merged into one run.
func elementRuns(t engine.Tensor) [][2]int {
	es := t.DType.Size()
	var runs [][2]int
	eachElem(t.Shape, t.Strides, func(at int) {
		lo := at * es
		if n := len(runs); n > 0 && runs[n-1][1] == lo {
			runs[n-1][1] = lo + es
			return
		}
		runs = append(runs, [2]int{lo, lo + es})
	})
	return runs
}

// tensorAsAtomic implements t.as_atomic(): the same memory, whose
// accesses the race detector checks as atomic ones. It is the documented
// way to say a concurrent access is deliberate (a flag polled in a loop):
// atomic accesses never race with each other, and still race with plain
// ones. Nothing changes without --race.
func tensorAsAtomic(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if err := noArgs("as_atomic", args, kw); err != nil {
		return nil, err
	}
	t := *b.Receiver().(*Tensor)
	t.atomic = true
	return &t, nil
}

// SetRace gives a shipped bundle's resolver (a remote session's) the
// session's detector, so that its host code names what it makes.
func (r *resolver) SetRace(d *race.Detector) { r.s.Race = d }
