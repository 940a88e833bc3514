package core

// The small types the other files of the core share: where a task runs
// (Pool, Job), how its members ended (memberEnd), and how two accesses of
// the same bytes relate (Hazard, SpaceKey). This file refers to no other.

// Pool says which kind of endpoint a task runs on.
type Pool uint8

// The endpoint pools.
const (
	NextLevel Pool = iota // chips at L3, child workers at L4 and up
	Sub                   // SUB workers
)

func (p Pool) String() string {
	if p == Sub {
		return "sub_worker"
	}
	return "next_level"
}

// Job is where a task runs, the part of it the scheduler reads.
type Job struct {
	Pool     Pool
	Worker   int   // single NEXT_LEVEL task: its worker; group: -1
	Group    []int // NEXT_LEVEL group: its workers, member i on Group[i]
	SubGroup int   // SUB group: number of members (0 for single tasks)
}

func (j *Job) isGroup() bool { return j.Group != nil || j.SubGroup > 0 }

// memberEnd is how a task's members ended, as bits: a group's members may
// end differently (one ran, another was stopped).
type memberEnd uint8

// How a member ended.
const (
	memberRan        memberEnd = 1 << iota // ran to its end, whatever its outcome
	memberStopped                          // stopped while it ran
	memberNotStarted                       // never started
)

// SpaceKey names one address space of a run.
type SpaceKey struct {
	Space    int // the engine's numbering: host memory, a worker's device memory, remote allocations
	Owner    int
	Buf, Gen uint64
}

// Hazard is how a later access of some bytes relates to an earlier one.
type Hazard uint8

const (
	ReadAfterWrite  Hazard = iota // a read of bytes an earlier task wrote
	WriteAfterRead                // a write of bytes an earlier task read
	WriteAfterWrite               // a write of bytes an earlier task wrote
)
