// Package leakcheck makes a test binary fail when its tests leave
// something behind: shared-memory objects of this process or of any
// process it started (they share its prefix, see below), goroutines
// beyond those running when the tests started, child processes still
// running, files in the private temporary directory the tests run with, or
// files in the private runtime directory (XDG_RUNTIME_DIR) they run with,
// where daemons keep their tokens and sockets.
//
// Every process the tests start inherits this process's shared-memory
// prefix (hal/shm's PrefixEnv), unless it is given another: child
// workers, daemons, the simpler binary. (A daemon gives each session a
// prefix of its own, and sweeps it when the session ends.) So the objects
// they leave are this binary's leftovers too, and the prefix's lock, which
// each of them holds while it may have objects, is gone at the end only if
// none of them is still running.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { leakcheck.Main(m) }
package leakcheck

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"simpler/hal/shm"
)

// settle is how long goroutines get to finish after the tests return.
const settle = 5 * time.Second

// Main runs the tests, then the leak checks, and exits.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run runs the tests with a private temporary directory, checks for
// leftovers and returns the exit code.
func Run(m *testing.M) int { return RunThen(m, nil) }

// RunThen is Run with release called between the tests and the checks,
// for a package that legitimately holds something across tests (a pool)
// until it is released.
func RunThen(m *testing.M, release func() error) int {
	if fuzzWorker() {
		// The fuzzing coordinator kills its workers when it is done: a
		// worker's checks would never finish, and what it made for them
		// (its private directories) would be left behind.
		return m.Run()
	}
	// os/signal's receiving goroutine, once started, lives as long as the
	// process; the testing package starts it when fuzzing, and some tests
	// start it (a command that watches SIGINT). Starting it here puts it in
	// the baseline the goroutine check counts against.
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR2)
	signal.Stop(c)
	tmp, err := os.MkdirTemp("", "simpler-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "leakcheck:", err)
		return 1
	}
	runtimeDir, err := os.MkdirTemp("", "simpler-runtime-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "leakcheck:", err)
		return 1
	}
	defer os.RemoveAll(runtimeDir)
	os.Setenv("XDG_RUNTIME_DIR", runtimeDir)
	// A binary its parent started under the parent's prefix (a test's
	// child) answers for its own objects only: the others are the
	// parent's, which it checks.
	inherited := os.Getenv(shm.PrefixEnv) == shm.Prefix()
	// The lock first, so that the prefix is proven alive for as long as
	// the tests run, whatever the processes sharing it do.
	if _, err := shm.ChildEnv(); err != nil {
		fmt.Fprintln(os.Stderr, "leakcheck:", err)
		return 1
	}
	os.Setenv(shm.PrefixEnv, shm.Prefix())
	outer := os.Getenv("TMPDIR")
	os.Setenv("TMPDIR", tmp)
	// Under -race every process sleeps a second at exit (to catch late
	// reports); the tests start hundreds of child and session processes,
	// and a race in one still makes it fail (exit code 66).
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	before := runtime.NumGoroutine()
	code := m.Run()
	var problems []string
	if release != nil {
		if err := release(); err != nil {
			problems = append(problems, fmt.Sprintf("releasing before the checks: %v", err))
		}
	}
	problems = append(problems, check(before, inherited)...)
	if inherited {
		shm.Finish()
	} else if p := finishPrefix(); p != "" {
		problems = append(problems, p)
	}
	if left := listDir(runtimeDir + "/simpler"); len(left) > 0 {
		problems = append(problems, fmt.Sprintf("runtime files (tokens, sockets) left behind: %v", left))
	}
	os.Setenv("TMPDIR", outer)
	os.RemoveAll(tmp)
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "leakcheck:", p)
		}
		code = 1
	}
	return code
}

// check returns a description of each kind of leftover: this process's
// shared-memory objects, goroutines beyond goroutinesBefore, and entries
// in the (private) temporary directory; with inherited, only the objects
// this process created count (the prefix is its parent's).
func check(goroutinesBefore int, inherited bool) []string {
	var problems []string
	if inherited {
		if left := shm.Owned(); len(left) > 0 {
			problems = append(problems, fmt.Sprintf("shared-memory objects left behind: %v", left))
		}
	} else if left, err := shmLeftovers(); err != nil {
		problems = append(problems, fmt.Sprintf("listing shared memory: %v", err))
	} else if len(left) > 0 {
		problems = append(problems, fmt.Sprintf("shared-memory objects left behind: %v", left))
	}
	if n, stacks := goroutines(goroutinesBefore); n > 0 {
		problems = append(problems, fmt.Sprintf("%d goroutine(s) left behind:\n%s", n, stacks))
	}
	if kids := children(); len(kids) > 0 {
		problems = append(problems, fmt.Sprintf("child processes left running: %v", kids))
	}
	if names := listDir(os.TempDir()); len(names) > 0 {
		problems = append(problems, fmt.Sprintf("temporary files left behind: %v", names))
	}
	return problems
}

// shmLeftovers lists the objects under this process's prefix, waiting
// briefly for processes that share it and are ending (a daemon's session
// removes its objects as it exits).
func shmLeftovers() ([]string, error) {
	deadline := time.Now().Add(settle)
	for {
		left, err := shm.Leftovers(shm.Prefix())
		if err != nil || len(left) == 0 || time.Now().After(deadline) {
			return left, err
		}
		time.Sleep(10 * time.Millisecond) // polling a directory, not waiting for work
	}
}

// finishPrefix drops this process's lock and removes it (shm.Finish),
// then waits briefly for the other processes that share the prefix to let
// go of it, removing what they left; a lock still held at the end means
// one of them is still running.
func finishPrefix() string {
	shm.Finish()
	lock := "/dev/shm/" + shm.LockName(shm.Prefix())
	deadline := time.Now().Add(settle)
	for {
		if _, err := os.Lstat(lock); err != nil {
			return ""
		}
		shm.SweepPrefix(shm.Prefix())
		if time.Now().After(deadline) {
			if _, err := os.Lstat(lock); err != nil {
				return ""
			}
			return "a process started under this binary's shared-memory prefix is still running (it holds " + lock + ")"
		}
		time.Sleep(10 * time.Millisecond) // polling a lock, not waiting for work
	}
}

// listDir names the entries of dir (none if it does not exist).
func listDir(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// children lists the live child processes of this process (from /proc),
// waiting briefly for ones that are exiting.
func children() []string {
	deadline := time.Now().Add(settle)
	for {
		var kids []string
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			// pid (comm) state ppid ...: comm may hold spaces, so parse
			// after the last ')'.
			s := string(stat)
			i := strings.LastIndexByte(s, ')')
			if i < 0 {
				continue
			}
			f := strings.Fields(s[i+1:])
			if len(f) >= 2 && f[0] != "Z" && f[1] == strconv.Itoa(os.Getpid()) {
				kids = append(kids, e.Name()+" "+s[:i+1])
			}
		}
		if len(kids) == 0 || time.Now().After(deadline) {
			return kids
		}
		time.Sleep(10 * time.Millisecond) // polling the process table
	}
}

// goroutines waits for the count to fall back to before and returns the
// excess with every stack if it does not.
func goroutines(before int) (int, string) {
	deadline := time.Now().Add(settle)
	for {
		n := runtime.NumGoroutine() - before
		if n <= 0 {
			return 0, ""
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			return n, string(buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond) // polling a count, not waiting for work
	}
}

// fuzzWorker reports whether this process is a worker the fuzzing
// coordinator started.
func fuzzWorker() bool {
	for _, a := range os.Args[1:] {
		if a == "-test.fuzzworker" || a == "-test.fuzzworker=true" {
			return true
		}
	}
	return false
}
