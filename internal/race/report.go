package race

import (
	"fmt"
	"strings"
)

// pairKey is a race's identity: the code locations of its two accesses
// and what each did. A loop that races a thousand times is one pair.
type pairKey struct {
	later, earlier string
	lk, ek         Kind
}

type pair struct {
	count int
}

// loc is an access's code location: its innermost Starlark frame.
func (a *access) loc() string {
	if len(a.st) == 0 {
		return a.op
	}
	return a.st[0].Pos
}

// edgeKey names a pair of tasks of one run whose edge the engine did not
// make, with the reason kept in notes.
type edgeKey struct {
	owner          any
	run            uint64
	later, earlier int
}

// NoEdge records that task later of run, on the worker owner, touches
// bytes task earlier touched and does not wait for it, and why (upstream's
// tag rules): the report of a race between them says so.
func (d *Detector) NoEdge(owner any, run uint64, later, earlier int, why string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := edgeKey{owner, run, later, earlier}
	if _, ok := d.notes[k]; !ok {
		d.notes[k] = why
	}
}

// report prints the race between a and the earlier access e over segment
// g, the first time its pair of locations is seen.
func (d *Detector) report(a, e *access, g *seg) {
	if !d.firstSeen(pairKey{a.loc(), e.loc(), a.kind, e.kind}) {
		return
	}
	d.races++
	lo, hi := max(a.lo, e.lo, g.lo), min(a.hi, e.hi, g.hi)
	var b strings.Builder
	b.WriteString("==================\nWARNING: DATA RACE\n")
	fmt.Fprintf(&b, "%s of %s by %s (%s):\n", a.kind, d.where(lo, hi), a.ctx.desc(), a.op)
	writeStack(&b, a.st)
	fmt.Fprintf(&b, "\nPrevious %s of %s by %s (%s):\n", strings.ToLower(e.kind.String()), d.where(lo, hi), e.ctx.desc(), e.op)
	writeStack(&b, e.st)
	fmt.Fprintf(&b, "\nUnordered: %s.\n", d.why(a.ctx, e.ctx))
	if d.dropped {
		b.WriteString("(Older accesses of some bytes were dropped for the history's bound: a race with one of them is not reported.)\n")
	}
	if d.cut {
		b.WriteString("(A child process's access log was cut at its bound: the accesses past it were not checked.)\n")
	}
	b.WriteString("==================\n")
	d.emit(b.String())
}

// firstSeen counts one more occurrence of k and reports whether it is
// the first: only the first is printed.
func (d *Detector) firstSeen(k pairKey) bool {
	if p := d.pairs[k]; p != nil {
		p.count++
		return false
	}
	d.pairs[k] = &pair{count: 1}
	d.order = append(d.order, k)
	return true
}

// reportUninit prints a read of bytes no one wrote since they were
// allocated, once per code location.
func (d *Detector) reportUninit(a *access, g *seg) {
	if !d.firstSeen(pairKey{later: a.loc(), earlier: "uninitialized"}) {
		return
	}
	d.uninit++
	lo, hi := max(a.lo, g.lo), min(a.hi, g.hi)
	var b strings.Builder
	b.WriteString("==================\nWARNING: UNINITIALIZED READ\n")
	fmt.Fprintf(&b, "Read of %s by %s (%s):\n", d.where(lo, hi), a.ctx.desc(), a.op)
	writeStack(&b, a.st)
	b.WriteString("\nNo one wrote these bytes since they were allocated: on hardware the run heap is not cleared (here it is, so the read saw zeros).\n==================\n")
	d.emit(b.String())
}

// Note writes a line about the detector's own coverage ("what was not
// checked") beside its reports.
func (d *Detector) Note(msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.emit("simpler: --race: " + msg + "\n")
}

func (d *Detector) emit(s string) {
	if d.out != nil {
		fmt.Fprint(d.out, s)
	}
}

func writeStack(b *strings.Builder, st Stack) {
	if len(st) == 0 {
		b.WriteString("  (no Starlark frame: the engine itself)\n")
	}
	for _, f := range st {
		fmt.Fprintf(b, "  %s()\n      %s\n", f.Func, f.Pos)
	}
}

// why says what would have ordered the two contexts' accesses and is not
// there.
func (d *Detector) why(a, e *Ctx) string {
	wa, we := a.who, e.who
	switch {
	case wa.Orch && we.Orch:
		return "two orchestration contexts with no wait between them"
	case wa.Orch:
		return fmt.Sprintf("the orchestration did not wait for %s (wait(), drain() or the run's end) before this access", taskName(we))
	case we.Orch:
		return fmt.Sprintf("the orchestration's access came after it submitted %s, and nothing orders the task after it", taskName(wa))
	}
	if x, y, ok := sameRun(a, e); ok {
		reason := d.whyTasks(x.who, y.who)
		if x != a || y != e {
			reason = fmt.Sprintf("they run inside tasks %d and %d of run %d of their parent worker: %s", min(x.who.Task, y.who.Task), max(x.who.Task, y.who.Task), x.who.Run, reason)
		}
		return reason
	}
	return "they belong to different runs or workers that nothing orders, and no barrier or notify/wait between them"
}

// sameRun finds the tasks, a and e or the tasks that submitted their
// runs (a level-4 worker's tasks over its nodes), that belong to one run.
func sameRun(a, e *Ctx) (x, y *Ctx, ok bool) {
	for x = a; x != nil && !x.who.Orch; x = x.who.Parent {
		for y = e; y != nil && !y.who.Orch; y = y.who.Parent {
			if x.who.Owner == y.who.Owner && x.who.Run == y.who.Run {
				return x, y, true
			}
		}
	}
	return nil, nil, false
}

// whyTasks says why two tasks of one run are not ordered.
func (d *Detector) whyTasks(wa, we Who) string {
	if wa.Task == we.Task {
		return fmt.Sprintf("members %d and %d of one group task start together, and no comm.barrier() or notify/wait orders these accesses", min(we.Member, wa.Member), max(we.Member, wa.Member))
	}
	note, ok := d.notes[edgeKey{wa.Owner, wa.Run, wa.Task, we.Task}]
	if !ok {
		note, ok = d.notes[edgeKey{wa.Owner, wa.Run, we.Task, wa.Task}]
	}
	if ok {
		return fmt.Sprintf("no task dependency: %s; and no barrier or notify/wait between the two", note)
	}
	return fmt.Sprintf("no task dependency orders task %d after task %d (no tensor tag links them), and no barrier or notify/wait between the two", max(wa.Task, we.Task), min(wa.Task, we.Task))
}

func taskName(w Who) string { return fmt.Sprintf("task %d of run %d", w.Task, w.Run) }

// Summary is the closing line of a run under --race that found races:
// how many, and which pairs repeated. It is empty when nothing was found.
func (d *Detector) Summary() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.races+d.uninit == 0 {
		return ""
	}
	var b strings.Builder
	for _, k := range d.order {
		if n := d.pairs[k].count; n > 1 {
			if k.earlier == "uninitialized" {
				fmt.Fprintf(&b, "simpler: the uninitialized read at %s happened %d times\n", k.later, n)
			} else {
				fmt.Fprintf(&b, "simpler: the race between %s and %s happened %d times\n", k.later, k.earlier, n)
			}
		}
	}
	fmt.Fprintf(&b, "simpler: found %d data race(s)", d.races)
	if d.uninit > 0 {
		fmt.Fprintf(&b, " and %d uninitialized read(s)", d.uninit)
	}
	return b.String()
}
