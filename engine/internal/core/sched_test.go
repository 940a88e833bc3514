package core

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Scheduler tests step the state machine by hand: no goroutines, no
// Worker. Tasks carry only an id and a Job.

func single(id, worker int) *Task {
	return &Task{id: int32(id), job: Job{Pool: NextLevel, Worker: worker}}
}

func group(id int, workers ...int) *Task {
	return &Task{id: int32(id), job: Job{Pool: NextLevel, Worker: -1, Group: workers}}
}

func subTask(id int) *Task { return &Task{id: int32(id), job: Job{Pool: Sub}} }

func subGroupTask(id, k int) *Task { return &Task{id: int32(id), job: Job{Pool: Sub, SubGroup: k}} }

// fmtAssign renders assignments as "task.member@pool:target", sorted so
// that the comparison does not depend on the order within one Dispatch.
func fmtAssign(as []Assignment) string {
	var s []string
	for _, a := range as {
		p := "N"
		if a.Pool == Sub {
			p = "S"
		}
		s = append(s, fmt.Sprintf("%d.%d@%s%d", a.Task.id, a.Member, p, a.Target))
	}
	slices.Sort(s)
	return strings.Join(s, " ")
}

// step pushes tasks, dispatches and checks the assignments made.
func step(t *testing.T, s *Sched, want string, push ...*Task) {
	t.Helper()
	for _, tk := range push {
		s.Push(tk)
	}
	if got := fmtAssign(s.Dispatch(nil)); got != want {
		t.Fatalf("dispatch after pushing %d task(s): got %q, want %q", len(push), got, want)
	}
}

func finish(t *testing.T, s *Sched, p Pool, target int, want string) {
	t.Helper()
	s.Finish(p, target)
	step(t, s, want)
}

func TestSchedPerWorkerFIFO(t *testing.T) {
	s := NewSched(2, 0)
	if !s.Idle() {
		t.Fatal("new scheduler is not idle")
	}
	step(t, s, "1.0@N0 3.0@N1", single(1, 0), single(2, 0), single(3, 1), single(4, 0))
	if s.Idle() {
		t.Fatal("idle with tasks running")
	}
	step(t, s, "") // nothing new while both are busy
	finish(t, s, NextLevel, 1, "")
	finish(t, s, NextLevel, 0, "2.0@N0")
	finish(t, s, NextLevel, 0, "4.0@N0")
	finish(t, s, NextLevel, 0, "")
	if !s.Idle() {
		t.Fatal("not idle after every task finished")
	}
}

func TestSchedGroupWaitsAndReserves(t *testing.T) {
	s := NewSched(3, 0)
	step(t, s, "1.0@N0", single(1, 0))
	step(t, s, "", group(2, 0, 1)) // worker 0 busy: the group waits
	// Worker 1 is idle but reserved by the waiting group; worker 2 is not.
	step(t, s, "4.0@N2", single(3, 1), single(4, 2))
	if s.Idle() {
		t.Fatal("idle with a group waiting")
	}
	// Worker 0 frees: every member starts at once, ahead of task 3.
	finish(t, s, NextLevel, 0, "2.0@N0 2.1@N1")
	finish(t, s, NextLevel, 0, "")
	finish(t, s, NextLevel, 1, "3.0@N1")
	finish(t, s, NextLevel, 1, "")
	finish(t, s, NextLevel, 2, "")
	if !s.Idle() {
		t.Fatal("not idle at the end")
	}
}

func TestSchedOnlyHeadGroupConsidered(t *testing.T) {
	s := NewSched(3, 0)
	step(t, s, "1.0@N0", single(1, 0))
	// Group 3 could run on idle worker 2, but group 2 is at the head.
	step(t, s, "", group(2, 0, 1), group(3, 2))
	// Worker 2 is not reserved by the head group, so a single task runs.
	step(t, s, "4.0@N2", single(4, 2))
	finish(t, s, NextLevel, 2, "")
	finish(t, s, NextLevel, 0, "2.0@N0 2.1@N1 3.0@N2")
}

func TestSchedGroupWithIdleTargetsStartsImmediately(t *testing.T) {
	s := NewSched(2, 0)
	step(t, s, "1.0@N1 1.1@N0", group(1, 1, 0)) // member i on group[i]
	step(t, s, "", single(2, 0))
	finish(t, s, NextLevel, 1, "")
	finish(t, s, NextLevel, 0, "2.0@N0")
}

func TestSchedSubFIFOShared(t *testing.T) {
	s := NewSched(0, 2)
	step(t, s, "1.0@S0 2.0@S1", subTask(1), subTask(2), subTask(3), subTask(4))
	finish(t, s, Sub, 1, "3.0@S1") // any idle SUB worker takes the head
	finish(t, s, Sub, 1, "4.0@S1")
	finish(t, s, Sub, 0, "")
	finish(t, s, Sub, 1, "")
	if !s.Idle() {
		t.Fatal("not idle at the end")
	}
}

func TestSchedSubGroupHoldsIdleWorkers(t *testing.T) {
	s := NewSched(1, 3)
	step(t, s, "1.0@S0", subTask(1))
	step(t, s, "", subGroupTask(2, 3)) // needs 3, 2 idle
	// The two idle SUB workers are held for the group; NEXT_LEVEL is not.
	step(t, s, "4.0@N0", subTask(3), single(4, 0))
	if s.Idle() {
		t.Fatal("idle with a SUB group waiting")
	}
	finish(t, s, Sub, 0, "2.0@S0 2.1@S1 2.2@S2")
	finish(t, s, Sub, 2, "3.0@S2")
	for _, id := range []int{0, 1, 2} {
		finish(t, s, Sub, id, "")
	}
	finish(t, s, NextLevel, 0, "")
	if !s.Idle() {
		t.Fatal("not idle at the end")
	}
}

func TestSchedSubGroupFitsNow(t *testing.T) {
	s := NewSched(0, 3)
	step(t, s, "1.0@S0", subTask(1))
	step(t, s, "2.0@S1 2.1@S2", subGroupTask(2, 2))
	step(t, s, "", subTask(3))
	finish(t, s, Sub, 1, "3.0@S1")
}

func TestSchedNextGroupDoesNotHoldSub(t *testing.T) {
	s := NewSched(2, 1)
	step(t, s, "1.0@N0", single(1, 0))
	step(t, s, "3.0@S0", group(2, 0, 1), subTask(3))
	finish(t, s, NextLevel, 0, "2.0@N0 2.1@N1")
}

func TestSchedIdleCountsQueuedAndRunning(t *testing.T) {
	s := NewSched(1, 1)
	s.Push(subTask(1))
	if s.Idle() {
		t.Fatal("idle with a queued SUB task")
	}
	step(t, s, "1.0@S0")
	if s.Idle() {
		t.Fatal("idle with a running SUB task")
	}
	s.Finish(Sub, 0)
	if !s.Idle() {
		t.Fatal("not idle after the SUB task finished")
	}
	s.Push(single(2, 0))
	if s.Idle() {
		t.Fatal("idle with a queued NEXT_LEVEL task")
	}
}

func TestSchedDepthPipelinesSinglesButNotGroups(t *testing.T) {
	s := NewSched(2, 0)
	s.SetDepth(0, 2)
	step(t, s, "1.0@N0 2.0@N0 4.0@N1", single(1, 0), single(2, 0), single(3, 0), single(4, 1))
	finish(t, s, NextLevel, 0, "3.0@N0")
	// A group waits until worker 0 holds nothing, and holds it meanwhile.
	step(t, s, "", group(5, 0, 1), single(6, 0))
	finish(t, s, NextLevel, 1, "")
	finish(t, s, NextLevel, 0, "")
	// Then singles fill the depth behind the group's member.
	finish(t, s, NextLevel, 0, "5.0@N0 5.1@N1 6.0@N0")
	finish(t, s, NextLevel, 1, "")
	finish(t, s, NextLevel, 0, "")
	finish(t, s, NextLevel, 0, "")
	if !s.Idle() {
		t.Fatal("scheduler not idle after every task finished")
	}
}
