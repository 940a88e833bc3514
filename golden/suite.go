package golden

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Suite runs many scripts the same way. It decides which runs each script
// gets, which of them may rewrite its golden file, and (in Run) how many go
// at once, what an interrupt leaves, and the order outcomes are reported in.
// `simpler test` runs a Suite; the repository's golden tests take its Jobs
// and run each as a Go subtest.
type Suite struct {
	// Runner is how every script runs. When Modes is set, its Args must
	// not hold --mode: each job adds its own.
	Runner
	// Modes, when set, runs every script once per mode, with --mode M after
	// Runner.Args (nil Args: DefaultArgs). Several modes make a metamorphic
	// check: a script must give the same output whether its workers'
	// children are goroutines ("thread") or processes ("process"), so the
	// one golden file is checked in every mode. Unset: one run per script,
	// with Runner.Args as they are.
	Modes []string
	// Exclusive lists modes whose runs go one at a time whatever Parallel
	// says: a process-mode script starts up to 17 processes, and several at
	// once starve a small machine into timeouts.
	Exclusive []string
	// Update rewrites each golden file from its script's run in Modes[0];
	// the other modes do not run (a check against files being rewritten
	// would race with them). Run again without Update to check them.
	Update bool
	// Parallel is how many jobs Run runs at once; less than 1 means 1.
	Parallel int
	// FailFast: once a job has failed no other job starts; those already
	// running finish, and the rest are reported with NotRun set.
	FailFast bool
}

// Job is one run of one script: in one mode of its Suite, or as the
// Suite's Runner.Args say when it has no Modes.
type Job struct {
	Script    string
	Mode      string // "" when the Suite has no Modes
	Update    bool   // rewrite the golden file instead of comparing with it
	Exclusive bool   // run alone among the exclusive jobs (see Suite.Exclusive)
	runner    *Runner
}

// Name is MODE/NAME, or NAME without a mode, NAME being the script's
// file name without .star: the name of the job's Go subtest.
func (j Job) Name() string {
	name := strings.TrimSuffix(filepath.Base(j.Script), ".star")
	if j.Mode == "" {
		return name
	}
	return j.Mode + "/" + name
}

// Run runs the job's script once and checks it, or rewrites its golden
// file.
func (j Job) Run() Outcome {
	o := j.runner.Check(j.Script, j.Update)
	o.Mode = j.Mode
	return o
}

// Jobs returns the runs of scripts, mode by mode in the order of Modes,
// scripts in the order given.
func (s *Suite) Jobs(scripts []string) []Job {
	modes := s.Modes
	if len(modes) == 0 {
		modes = []string{""}
	}
	if s.Update {
		modes = modes[:1]
	}
	var jobs []Job
	for _, mode := range modes {
		r := s.runnerFor(mode)
		for _, script := range scripts {
			jobs = append(jobs, Job{Script: script, Mode: mode, Update: s.Update, Exclusive: slices.Contains(s.Exclusive, mode), runner: r})
		}
	}
	return jobs
}

// runnerFor is the Runner of one mode: the Suite's, with --mode added.
func (s *Suite) runnerFor(mode string) *Runner {
	r := s.Runner
	if mode == "" {
		return &r
	}
	base := r.Args
	if base == nil {
		base = DefaultArgs
	}
	r.Args = append(slices.Clone(base), "--mode", mode)
	return &r
}

// Run runs jobs, Parallel at a time, and calls report with each outcome in
// the order of jobs, each as soon as it and those before it are done.
// When the Runner's Context is cancelled the running scripts are killed
// (see Runner.Run) and the jobs not started yet are reported as
// interrupted. It returns how many passed and how many failed.
func (s *Suite) Run(jobs []Job, report func(Outcome)) (passed, failed int) {
	ctx := s.Context
	if ctx == nil {
		ctx = context.Background()
	}
	outcomes := make([]chan Outcome, len(jobs))
	for i := range outcomes {
		outcomes[i] = make(chan Outcome, 1)
	}
	next := make(chan int)
	var exclusive sync.Mutex // held by the exclusive job that runs
	var wg sync.WaitGroup
	stop := &failFast{on: s.FailFast}
	for range min(max(s.Parallel, 1), len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				o := runJob(jobs[i], &exclusive, stop)
				stop.saw(o)
				outcomes[i] <- o
			}
		}()
	}
	go func() {
		defer close(next)
		for i := range jobs {
			select {
			case next <- i:
			case <-ctx.Done():
				for ; i < len(jobs); i++ {
					outcomes[i] <- Outcome{Script: jobs[i].Script, Mode: jobs[i].Mode, Problem: "interrupted before it ran"}
				}
				return
			}
		}
	}()
	for i := range jobs {
		o := <-outcomes[i]
		switch {
		case o.NotRun:
		case o.Passed:
			passed++
		default:
			failed++
		}
		report(o)
	}
	wg.Wait()
	return passed, failed
}

// runJob runs j, unless stop says an earlier job failed by the time j's
// turn came (after any wait for the exclusive lock).
func runJob(j Job, exclusive *sync.Mutex, stop *failFast) Outcome {
	if j.Exclusive {
		exclusive.Lock()
		defer exclusive.Unlock()
	}
	if stop.stopped() {
		return Outcome{Script: j.Script, Mode: j.Mode, NotRun: true, Problem: "not run: an earlier script failed (-failfast)"}
	}
	return j.Run()
}

// failFast remembers whether a job has failed, when the Suite's FailFast
// makes that stop the jobs not started yet. A worker records its job's
// outcome before it takes the next job, so with Parallel 1 no job starts
// after a failure.
type failFast struct {
	on     bool
	mu     sync.Mutex
	failed bool
}

func (f *failFast) saw(o Outcome) {
	if !f.on || o.Passed || o.NotRun {
		return
	}
	f.mu.Lock()
	f.failed = true
	f.mu.Unlock()
}

func (f *failFast) stopped() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}
