package core

// ID is the task's number within its run, from 1 in submit order.
func (t *Task) ID() int { return int(t.id) }

// Run is the run the task belongs to.
func (t *Task) Run() *Run { return t.run }

// Job is where the task runs.
func (t *Task) Job() *Job { return &t.job }

// Err is why the task failed (nil: it has not, or not yet).
func (t *Task) Err() error { return t.err }

// Done reports whether the task has retired.
func (t *Task) Done() bool { return t.done }

// Pending is how many producers the task still waits for.
func (t *Task) Pending() int { return int(t.pending) }

// Deps is the ids of the task's producers, finished or not, when its run
// is observed (nil otherwise): what a trace shows.
func (t *Task) Deps() []int { return t.deps }

// Consumers is the tasks waiting on t (none once it retired).
func (t *Task) Consumers() []*Task { return t.consumers }

// dependOn adds producer p to t unless it is already there or finished: a
// producer that failed already poisons t at once.
func (t *Task) dependOn(p *Task) {
	if t.run.observed && (len(t.deps) == 0 || t.deps[len(t.deps)-1] != int(p.id)) {
		t.deps = append(t.deps, int(p.id))
	}
	if p.done {
		if p.err != nil && t.poison == nil {
			t.poison = p.err
		}
		return
	}
	if n := len(p.consumers); n > 0 && p.consumers[n-1] == t {
		return // already waiting on p through another range
	}
	p.consumers = append(p.consumers, t)
	t.pending++
}
