package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"simpler/engine"
	"simpler/engine/remote"
	"simpler/hal/shm"
	"simpler/internal/token"
	"simpler/starlib"
	"simpler/wire"
)

// sessionCommand is the hidden subcommand that serves one remote session;
// the daemon passes it the connection as file descriptor 3 and its link to
// the daemon as descriptor 4.
const sessionCommand = "__session"

// remoteOptions are the flags of `simpler remote-l3-worker`.
type remoteOptions struct {
	listen, tokenFile string
	lim               wire.Limits
	queued            uint
	maxSessions       int
	maxPending        int
}

func (o *remoteOptions) register(fs *flag.FlagSet) {
	o.lim = remote.DefaultLimits
	o.lim.BufferBytes = 0
	fs.StringVar(&o.listen, "listen", "127.0.0.1:7700", "`HOST:PORT` to serve on (port 0 picks a free one)")
	fs.StringVar(&o.tokenFile, "token-file", "", "`FILE` holding the token parents must prove (mode 0600, at least 16 bytes); without it the daemon makes one in its runtime directory")
	fs.Uint64Var(&o.lim.BufferBytes, "max-buffer-bytes", 0, "`BYTES` of remote buffers and global windows one session may hold; 0: half of /dev/shm's free space at start")
	fs.Uint64Var(&o.lim.CopyBytes, "max-copy-bytes", o.lim.CopyBytes, "`BYTES` of one remote copy or staging")
	fs.UintVar(&o.queued, "max-queued-tasks", uint(o.lim.QueuedTasks), "`N` tasks one session may have queued")
	fs.Uint64Var(&o.lim.QueuedBytes, "max-queued-bytes", o.lim.QueuedBytes, "payload `BYTES` of one session's queued tasks")
	fs.Uint64Var(&o.lim.LoadSteps, "max-load-steps", o.lim.LoadSteps, "Starlark `STEPS` of one shipped module's top-level code")
	fs.IntVar(&o.maxSessions, "max-sessions", 64, "`N` sessions served at once")
	fs.IntVar(&o.maxPending, "max-pending", 32, "`N` connections still proving the token at once (the oldest is dropped)")
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
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "simpler remote-l3-worker: "+format+"\n", a...)
		return code
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return fail(2, "--listen %q is not host:port", o.listen)
	}
	if err := checkLimits(&o.lim, o.queued); err != nil {
		return fail(2, "%v", err)
	}
	var tok []byte
	if o.tokenFile != "" {
		t, err := token.Read(o.tokenFile)
		if err != nil {
			return fail(2, "%v", err)
		}
		tok = t
	}
	shm.SweepDead()
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
	d, err := remote.NewDaemon(ln, remote.DaemonConfig{Token: tok, Log: stderr, Limits: o.lim, MaxSessions: o.maxSessions, MaxPending: o.maxPending,
		Session: &engine.Launcher{Path: exe, Args: []string{sessionCommand}, Stdout: stdout, Stderr: stderr}})
	if err != nil {
		ln.Close()
		return fail(1, "%v", err)
	}
	return serveDaemon(d, ln, tokenPath, stdout, stderr)
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

// cmdSession serves one session (started by the daemon).
func cmdSession(args []string, stderr io.Writer) int {
	if len(args) != 0 {
		fmt.Fprintln(stderr, "simpler session: started by remote-l3-worker, takes no arguments")
		return 2
	}
	if err := remote.ServeSessionFD(sessionResolver); err != nil {
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
