package core

// The scheduler decides which ready task runs on which endpoint. It is a
// plain state machine: Push a ready task, Finish an endpoint's current job,
// and ask Dispatch for the assignments that follow. It does no I/O and
// starts no goroutines, so tests step it directly.
//
// Queues: one FIFO per NEXT_LEVEL worker, one shared SUB FIFO, and one group
// FIFO. Only the head of the group FIFO is considered; it dispatches when
// every target is idle, all at once, and until then it reserves its targets
// so single tasks cannot starve it.
//
// An endpoint runs one task at a time unless SetDepth lets it hold more
// (a remote node queues the tasks it is sent and runs them in order, so
// sending the next before the last completes hides the round trip). A
// group still waits for its targets to be idle.

// Assignment is one member of a task placed on one endpoint.
type Assignment struct {
	Task   *Task
	Member int // index into the task's args list (0 for single tasks)
	Pool   Pool
	Target int // worker id within the pool
}

type fifo struct {
	items []*Task
	head  int
}

func (q *fifo) push(t *Task) { q.items = append(q.items, t) }
func (q *fifo) len() int     { return len(q.items) - q.head }
func (q *fifo) peek() *Task  { return q.items[q.head] }

func (q *fifo) pop() *Task {
	t := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	if q.head == len(q.items) { // empty: reuse the backing array
		q.items, q.head = q.items[:0], 0
	}
	return t
}

// Sched is the scheduler state machine.
type Sched struct {
	next     []fifo
	nextLoad []int // tasks running or sent on each NEXT_LEVEL worker
	depth    []int // how many each may hold
	subQ     fifo
	subBusy  []bool
	subIdle  int
	groups   fifo
	reserved []bool // NEXT_LEVEL workers held by the head group
}

// NewSched makes a scheduler for nNext NEXT_LEVEL and nSub SUB workers.
func NewSched(nNext, nSub int) *Sched {
	return &Sched{
		next:     make([]fifo, nNext),
		nextLoad: make([]int, nNext),
		depth:    depths(nNext),
		subBusy:  make([]bool, nSub),
		subIdle:  nSub,
		reserved: make([]bool, nNext),
	}
}

func depths(n int) []int {
	d := make([]int, n)
	for i := range d {
		d[i] = 1
	}
	return d
}

// SetDepth lets NEXT_LEVEL worker w hold up to n single tasks at once.
func (s *Sched) SetDepth(w, n int) { s.depth[w] = max(n, 1) }

// Push queues a ready task.
func (s *Sched) Push(t *Task) {
	switch {
	case t.job.isGroup():
		s.groups.push(t)
	case t.job.Pool == Sub:
		s.subQ.push(t)
	default:
		s.next[t.job.Worker].push(t)
	}
}

// Finish marks an endpoint idle again.
func (s *Sched) Finish(p Pool, target int) {
	if p == Sub {
		s.subBusy[target] = false
		s.subIdle++
		return
	}
	s.nextLoad[target]--
}

// Idle reports whether no task is queued or running.
func (s *Sched) Idle() bool {
	if s.subQ.len() > 0 || s.groups.len() > 0 || s.subIdle != len(s.subBusy) {
		return false
	}
	for i := range s.next {
		if s.next[i].len() > 0 || s.nextLoad[i] > 0 {
			return false
		}
	}
	return true
}

// Dispatch appends to out every assignment that can start now.
func (s *Sched) Dispatch(out []Assignment) []Assignment {
	out = s.dispatchGroups(out)
	for w := range s.next {
		for !s.reserved[w] && s.nextLoad[w] < s.depth[w] && s.next[w].len() > 0 {
			s.nextLoad[w]++
			out = append(out, Assignment{Task: s.next[w].pop(), Pool: NextLevel, Target: w})
		}
	}
	if s.subHeld() {
		return out
	}
	for s.subIdle > 0 && s.subQ.len() > 0 {
		out = append(out, Assignment{Task: s.subQ.pop(), Pool: Sub, Target: s.takeSub()})
	}
	return out
}

// dispatchGroups starts head groups while their targets are idle, then
// reserves the targets of the first one that must wait.
func (s *Sched) dispatchGroups(out []Assignment) []Assignment {
	for i := range s.reserved {
		s.reserved[i] = false
	}
	for s.groups.len() > 0 {
		t := s.groups.peek()
		if t.job.SubGroup > 0 {
			if s.subIdle < t.job.SubGroup {
				return out // subHeld keeps the idle SUB workers for it
			}
			s.groups.pop()
			for m := 0; m < t.job.SubGroup; m++ {
				out = append(out, Assignment{Task: t, Member: m, Pool: Sub, Target: s.takeSub()})
			}
			continue
		}
		for _, w := range t.job.Group {
			if s.nextLoad[w] > 0 {
				for _, r := range t.job.Group {
					s.reserved[r] = true
				}
				return out
			}
		}
		s.groups.pop()
		for m, w := range t.job.Group {
			s.nextLoad[w]++
			out = append(out, Assignment{Task: t, Member: m, Pool: NextLevel, Target: w})
		}
	}
	return out
}

// subHeld reports whether the head group is a SUB group waiting for
// workers, in which case idle SUB workers are kept for it.
func (s *Sched) subHeld() bool {
	return s.groups.len() > 0 && s.groups.peek().job.SubGroup > 0
}

func (s *Sched) takeSub() int {
	for i, busy := range s.subBusy {
		if !busy {
			s.subBusy[i] = true
			s.subIdle--
			return i
		}
	}
	panic("core: takeSub with no idle SUB worker")
}

// Remove takes every queued task for which drop is true out of the
// queues (a cancelled run's), keeping the others in order, and returns
// them. Running tasks are not the scheduler's to stop.
func (s *Sched) Remove(drop func(*Task) bool) []*Task {
	var out []*Task
	filter := func(q *fifo) {
		kept := q.items[:0:0]
		for _, t := range q.items[q.head:] {
			if drop(t) {
				out = append(out, t)
			} else {
				kept = append(kept, t)
			}
		}
		q.items, q.head = kept, 0
	}
	for i := range s.next {
		filter(&s.next[i])
	}
	filter(&s.subQ)
	filter(&s.groups)
	return out
}

func (s *Sched) checkInvariants(fail func(string, ...any)) {
	for w, n := range s.nextLoad {
		if n < 0 || n > s.depth[w] {
			fail("NEXT_LEVEL worker %d holds %d tasks, its depth is %d", w, n, s.depth[w])
		}
	}
	idle := 0
	for _, busy := range s.subBusy {
		if !busy {
			idle++
		}
	}
	if idle != s.subIdle {
		fail("%d SUB workers idle, the count says %d", idle, s.subIdle)
	}
}
