package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"simpler/engine"
	"simpler/engine/remote"
	"simpler/hal"
	"simpler/hal/shm"
	"simpler/internal/token"
	"simpler/starlib"
	"simpler/wire"
)

// sessionCommand is the hidden subcommand that serves one remote session;
// the daemon passes it the connection as file descriptor 3, its link to
// the daemon as descriptor 4 and the daemon's memory ledger as 5.
const sessionCommand = "__session"

// remoteOptions are the flags of `simpler remote-l3-worker`.
type remoteOptions struct {
	listen, tokenFile string
	lim               wire.Limits
	queued            uint
	totalBytes        uint64
	maxSessions       int
	maxPending        int
	maxOutput         uint64
	quietSessions     bool
	race              bool
	rank              rankOptions
}

// rankOptions are the flags of a rank that dials its level-4 worker
// (--connect) instead of listening.
type rankOptions struct {
	connect, rank, platform, devices string
	timeout                          time.Duration
}

// rankFlags are the flags that only --connect takes.
var rankFlags = []string{"rank", "platform", "devices", "connect-timeout"}

func (o *remoteOptions) register(fs *flag.FlagSet) {
	o.lim = remote.DefaultLimits
	o.lim.BufferBytes = 0
	fs.StringVar(&o.listen, "listen", "127.0.0.1:7700", "`HOST:PORT` to serve on (port 0 picks a free one)")
	fs.StringVar(&o.tokenFile, "token-file", "", "`FILE` holding the token parents must prove (mode 0600, at least 16 bytes); without it the daemon makes one in its runtime directory")
	fs.Uint64Var(&o.lim.BufferBytes, "max-buffer-bytes", 0, "`BYTES` of remote buffers and global windows one session may hold; 0: half of /dev/shm's free space at start")
	fs.Uint64Var(&o.totalBytes, "max-total-bytes", 0, "`BYTES` of remote buffers, imports and global windows all sessions together may hold; 0: three quarters of /dev/shm's free space at start")
	fs.Uint64Var(&o.lim.CopyBytes, "max-copy-bytes", o.lim.CopyBytes, "`BYTES` of one remote copy or staging")
	fs.UintVar(&o.queued, "max-queued-tasks", uint(o.lim.QueuedTasks), "`N` tasks one session may have queued")
	fs.Uint64Var(&o.lim.QueuedBytes, "max-queued-bytes", o.lim.QueuedBytes, "payload `BYTES` of one session's queued tasks")
	fs.Uint64Var(&o.lim.LoadSteps, "max-load-steps", o.lim.LoadSteps, "Starlark `STEPS` of one shipped module's top-level code")
	fs.IntVar(&o.maxSessions, "max-sessions", 64, "`N` sessions served at once")
	fs.IntVar(&o.maxPending, "max-pending", 64, "`N` connections that have not sent their proof, at once; half of that from one address (beyond, the oldest of the address with the most is dropped)")
	fs.BoolVar(&o.race, "race", false, "check every session's kernels, SUB callables and orchestration for data races (docs/race.md); the reports go to the parent tagged with the node, and its count to its exit status")
	fs.BoolVar(&o.quietSessions, "quiet-sessions", false, "log no line for each session that ends (simpler run and simpler test start their daemons so)")
	fs.Uint64Var(&o.maxOutput, "max-output-bytes", remote.DefaultOutputBytes, "`BYTES` of output one session passes to the daemon's, as tagged lines (the rest is dropped, and counted)")
	fs.StringVar(&o.rank.connect, "connect", "", "dial the level-4 worker at `HOST:PORT` as a rank of its worker group (add_worker_group), instead of listening; needs --token-file")
	fs.StringVar(&o.rank.rank, "rank", "", "with --connect: this rank `N`; default: the launcher's $"+strings.Join(remote.RankEnv, ", $"))
	fs.StringVar(&o.rank.platform, "platform", "", "with --connect: the platform `P` this rank serves; default: $SIMPLER_PLATFORM, else a2a3sim")
	fs.StringVar(&o.rank.devices, "devices", "", "with --connect: the device `IDS` this rank offers (0-3, 0,2); default: whichever the worker asks for")
	fs.DurationVar(&o.rank.timeout, "connect-timeout", time.Minute, "with --connect: how long to keep trying to reach the worker and to finish joining, as a `DURATION`")
}

// cmdRemote is `simpler remote-l3-worker --listen HOST:PORT [--token-file F] [bounds]`.
func cmdRemote(args []string, stdout, stderr io.Writer) int {
	fs := flagSet("remote-l3-worker")
	var o remoteOptions
	o.register(fs)
	if code, ok := parseFlags("remote-l3-worker", fs, args, nil, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "remote-l3-worker", "takes no arguments, got %q", fs.Args())
	}
	set := setFlags(fs)
	if o.rank.connect != "" {
		if _, ok := set["listen"]; ok {
			return usageError(stderr, "remote-l3-worker", "--listen and --connect: a rank dials its worker, it does not listen")
		}
		return cmdRank(&o, stdout, stderr)
	}
	for _, f := range rankFlags {
		if _, ok := set[f]; ok {
			return usageError(stderr, "remote-l3-worker", "--%s is for a rank, with --connect", f)
		}
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "simpler remote-l3-worker: "+format+"\n", a...)
		return code
	}
	tok, err := daemonToken(&o)
	if err != nil {
		return fail(2, "%v", err)
	}
	if err := checkLimits(&o.lim, o.queued); err != nil {
		return fail(2, "%v", err)
	}
	if o.maxOutput == 0 {
		return fail(2, "--max-output-bytes must be > 0")
	}
	shm.SweepDead()
	if tok != nil {
		// Token files of daemons killed before they could remove theirs
		// (Generate sweeps them for a daemon that makes its own).
		token.SweepStale()
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fail(1, "%v", err)
	}
	tokenPath := ""
	if tok == nil {
		if tokenPath, tok, err = token.Generate(ln.Addr().(*net.TCPAddr).Port); err != nil {
			ln.Close()
			return fail(1, "%v", err)
		}
		defer token.Remove(tokenPath)
	}
	exe, err := os.Executable()
	if err != nil {
		ln.Close()
		return fail(1, "%v", err)
	}
	d, err := remote.NewDaemon(ln, remote.DaemonConfig{Token: tok, Log: stderr, Limits: o.lim, TotalBytes: o.totalBytes, MaxSessions: o.maxSessions, MaxPending: o.maxPending, MaxOutputBytes: o.maxOutput, QuietSessions: o.quietSessions,
		Session: &engine.Launcher{Path: exe, Args: o.sessionArgs(), Stdout: stdout, Stderr: stderr}})
	if err != nil {
		ln.Close()
		return fail(1, "%v", err)
	}
	return serveDaemon(d, ln, tokenPath, stdout, stderr)
}

// sessionRace is the session command's flag that gives it a detector.
const sessionRace = "--race"

// sessionArgs start a session process as the daemon's flags say: with a
// race detector under --race.
func (o *remoteOptions) sessionArgs() []string {
	if o.race {
		return []string{sessionCommand, sessionRace}
	}
	return []string{sessionCommand}
}

// daemonToken checks --listen against --token-file and reads the token
// file when one is given (nil: the daemon makes its own token).
func daemonToken(o *remoteOptions) ([]byte, error) {
	host, _, err := net.SplitHostPort(o.listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %q is not host:port", o.listen)
	}
	if !token.IsLoopback(host) && o.tokenFile == "" {
		// The token a daemon makes itself lives in its runtime
		// directory, which only this host's user reads: a daemon other
		// hosts reach needs a token they were given, as add_worker_group's
		// listen= does.
		return nil, fmt.Errorf("--listen %q is not a loopback address; a daemon that listens beyond this host needs --token-file (a file of the token, mode 0600, that its parents prove)", o.listen)
	}
	if o.tokenFile == "" {
		return nil, nil
	}
	return token.Read(o.tokenFile)
}

// checkLimits validates the bound flags and fills the memory default.
func checkLimits(lim *wire.Limits, queued uint) error {
	if lim.BufferBytes == 0 {
		lim.BufferBytes = shmFree() / 2
	}
	if queued == 0 || queued > 1<<20 {
		return fmt.Errorf("--max-queued-tasks must be in 1..%d, got %d", 1<<20, queued)
	}
	lim.QueuedTasks = uint32(queued)
	switch {
	case lim.BufferBytes == 0:
		return fmt.Errorf("--max-buffer-bytes must be > 0 (/dev/shm has no free space to take half of)")
	case lim.CopyBytes == 0 || lim.CopyBytes > wire.MaxCopy:
		return fmt.Errorf("--max-copy-bytes must be in 1..%d, got %d", wire.MaxCopy, lim.CopyBytes)
	case lim.QueuedBytes == 0 || lim.LoadSteps == 0:
		return fmt.Errorf("--max-queued-bytes and --max-load-steps must be > 0")
	}
	return nil
}

// shmFree is the free space of /dev/shm, where sessions put their memory.
func shmFree() uint64 {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil {
		return 0
	}
	return st.Bavail * uint64(st.Bsize)
}

// serveDaemon runs d until an interrupt, after saying where it listens
// (and where its token is) on stdout.
func serveDaemon(d *remote.Daemon, ln net.Listener, tokenPath string, stdout, stderr io.Writer) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		<-sig
		d.Close()
	}()
	// Tests and scripts wait for this line: the daemon is ready.
	fmt.Fprintf(stdout, "simpler remote-l3-worker: listening on %s\n", ln.Addr())
	if tokenPath != "" {
		fmt.Fprintf(stdout, "simpler remote-l3-worker: token in %s (clients on this host find it there)\n", tokenPath)
	}
	if f, ok := stdout.(interface{ Sync() error }); ok {
		f.Sync()
	}
	err := d.Serve()
	d.Close()
	if err != nil {
		fmt.Fprintf(stderr, "simpler remote-l3-worker: %v\n", err)
		return 1
	}
	return 0
}

// cmdSession serves one session (started by the daemon), with a race
// detector when the daemon runs with --race.
func cmdSession(args []string, stderr io.Writer) int {
	raceOn := len(args) == 1 && args[0] == sessionRace
	if len(args) != 0 && !raceOn {
		fmt.Fprintln(stderr, "simpler session: started by remote-l3-worker, takes no arguments but --race")
		return 2
	}
	// The resolver's session holds the host memory kernels made here
	// (host_tensor() in a kernel), named under this process: it is
	// released once the session has closed its node.
	var mu sync.Mutex
	var made []io.Closer
	err := remote.ServeSessionFD(func(b wire.Bundle, loadSteps uint64) (engine.Resolver, error) {
		r, err := sessionResolver(b, loadSteps)
		if c, ok := r.(io.Closer); ok {
			mu.Lock()
			made = append(made, c)
			mu.Unlock()
		}
		return r, err
	}, raceOn)
	mu.Lock()
	defer mu.Unlock()
	for _, c := range made {
		c.Close()
	}
	if err != nil {
		fmt.Fprintf(stderr, "simpler session: %v\n", err)
		return 1
	}
	return 0
}

// sessionResolver loads a shipped bundle under the daemon's step bound.
func sessionResolver(b wire.Bundle, loadSteps uint64) (engine.Resolver, error) {
	starlib.MaxLoadSteps = loadSteps
	return starlib.NewSourceResolver(b.Root, b.Modules)
}

// cmdRank is `simpler remote-l3-worker --connect HOST:PORT --token-file F
// [--rank N]`: a rank of a worker group, which dials its level-4 worker,
// joins (both sides prove the token) and serves the one session the
// worker asks for, then exits.
func cmdRank(o *remoteOptions, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "simpler remote-l3-worker: "+format+"\n", a...)
		return code
	}
	cfg, code, err := o.rankConfig()
	if err != nil {
		return fail(code, "%v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fail(1, "%v", err)
	}
	cfg.Daemon = remote.DaemonConfig{Log: stderr, Limits: o.lim, TotalBytes: o.totalBytes, MaxOutputBytes: o.maxOutput,
		Session: &engine.Launcher{Path: exe, Args: o.sessionArgs(), Stdout: stdout, Stderr: stderr}}
	shm.SweepDead()
	// SIGINT or SIGTERM (mpirun ending its job) ends the session.
	stop, done := make(chan struct{}), make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case <-sig:
			close(stop)
		case <-done:
		}
	}()
	err = remote.ServeRank(cfg, stop)
	signal.Stop(sig)
	close(done)
	if err != nil {
		return fail(1, "%v", err)
	}
	return 0
}

// rankConfig checks a rank's flags: the worker's address and the token
// are required, the rank comes from --rank or the launcher's environment.
// code is 2 for a wrong command line, 1 for what the environment lacks.
func (o *remoteOptions) rankConfig() (remote.RankConfig, int, error) {
	r := o.rank
	cfg := remote.RankConfig{Connect: r.connect, Timeout: r.timeout}
	if _, _, err := net.SplitHostPort(r.connect); err != nil {
		return cfg, 2, fmt.Errorf("--connect %q is not host:port", r.connect)
	}
	if o.tokenFile == "" {
		return cfg, 2, fmt.Errorf("--connect needs --token-file: the file of the token the worker's group proves (its ranks are given it)")
	}
	if r.timeout <= 0 {
		return cfg, 2, fmt.Errorf("--connect-timeout must be > 0, got %v", r.timeout)
	}
	if err := checkLimits(&o.lim, o.queued); err != nil {
		return cfg, 2, err
	}
	tok, err := token.Read(o.tokenFile)
	if err != nil {
		return cfg, 2, err
	}
	cfg.Token = tok
	if r.rank != "" {
		n, err := strconv.Atoi(r.rank)
		if err != nil || n < 0 || n >= wire.MaxGroupRanks {
			return cfg, 2, fmt.Errorf("--rank %q is not a rank in 0..%d", r.rank, wire.MaxGroupRanks-1)
		}
		cfg.Rank = n
	} else if cfg.Rank, _, err = remote.RankFromEnv(os.Getenv); err != nil {
		return cfg, 1, err
	}
	cfg.Platform = r.platform
	if cfg.Platform == "" {
		if cfg.Platform = os.Getenv("SIMPLER_PLATFORM"); cfg.Platform == "" {
			cfg.Platform = "a2a3sim"
		}
	}
	p, err := hal.Lookup(cfg.Platform)
	if err == nil {
		err = p.Check()
	}
	if err != nil {
		return cfg, 1, err
	}
	if r.devices != "" {
		if cfg.DeviceIDs, err = parseDevices(r.devices); err != nil {
			return cfg, 2, err
		}
	}
	return cfg, 0, nil
}
