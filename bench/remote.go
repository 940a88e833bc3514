package bench

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"simpler/engine"
	"simpler/engine/remote"
	"simpler/hal"
	"simpler/internal/loopbulk"
	"simpler/internal/token"
	"simpler/starlib"
	"simpler/wire"
)

// loopbackTCP measures the limits a remote node is compared with: bulk
// bandwidth of one 64 MiB transfer and the median 64-byte round trip, both
// over 127.0.0.1 in this process.
func loopbackTCP() (bw float64, rtt time.Duration, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	defer ln.Close()
	const bulk = 64 << 20
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		buf := make([]byte, 1<<20)
		for got := 0; got < 5*bulk; {
			n, err := c.Read(buf)
			if err != nil {
				errc <- err
				return
			}
			got += n
		}
		c.Write([]byte{1})
		errc <- echo(c)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	data := make([]byte, bulk)
	for i := range data {
		data[i] = byte(i)
	}
	var best time.Duration
	for i := 0; i < 5; i++ {
		start := time.Now()
		if _, err := c.Write(data); err != nil {
			return 0, 0, err
		}
		if d := time.Since(start); best == 0 || d < best {
			best = d
		}
	}
	io.ReadFull(c, make([]byte, 1))
	ping := make([]byte, 64)
	rtt, err = median(201, func() error {
		if _, err := c.Write(ping); err != nil {
			return err
		}
		_, err := io.ReadFull(c, ping)
		return err
	})
	c.Close()
	if e := <-errc; err == nil {
		err = e
	}
	return float64(bulk) / best.Seconds(), rtt, err
}

// EchoCommand is the hidden subcommand that runs EchoPeer: the other end
// of the ping-pong between two processes.
const EchoCommand = "__echo"

// EchoPeer connects to addr and echoes (see echo) until the connection
// ends.
func EchoPeer(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return echo(c)
}

// echo sends back every 64-byte message until the connection ends.
func echo(c net.Conn) error {
	ping := make([]byte, 64)
	for {
		if _, err := io.ReadFull(c, ping); err != nil {
			return nil
		}
		if _, err := c.Write(ping); err != nil {
			return err
		}
	}
}

// processRTT is the median 64-byte round trip between this process and a
// peer process (this binary, as EchoCommand) over 127.0.0.1, with plain
// blocking reads: the raw form of what a remote node's task pays.
func processRTT() (time.Duration, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	peer := exec.Command(exe, EchoCommand, ln.Addr().String())
	peer.Stderr = os.Stderr
	if err := peer.Start(); err != nil {
		return 0, err
	}
	defer peer.Wait()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		peer.Process.Kill()
		return 0, err
	}
	defer c.Close() // ends the peer
	ping := make([]byte, 64)
	return median(201, func() error {
		if _, err := c.Write(ping); err != nil {
			return err
		}
		_, err := io.ReadFull(c, ping)
		return err
	})
}

const remoteKernels = `
def node_noop(o, args, cfg):
    pass
`

const remoteScript = `
load("kernels.star", "node_noop")

def orch(o, args, cfg):
    for i in range(args.scalar(0)):
        o.submit_next_level(node_noop, worker = 0)

def main(ctx):
    w = Worker(level = 4, platform = "a2a3sim")
    w.add_remote_worker(endpoint = ctx.argv[0], platform = "a2a3sim", device_ids = [0])
    w.register(node_noop)
    w.init()
    for n in [1, 256]:
        times = []
        reps = 31 if n == 1 else 5
        for r in range(reps):
            start = time.now()
            w.run(orch, TaskArgs(scalars = [n]))
            times.append((time.now() - start).nanoseconds)
        print("run", n, sorted(times)[reps // 2])
    w.close()
`

// limits are what the remote figures are compared with, measured in the
// same run: loopback bulk bandwidth (bytes/s), the 64-byte round trip in
// this process, and the same between two processes.
type limits struct {
	bw        float64
	rtt, prtt time.Duration
}

// remoteSetup measures the limits and starts a daemon for a remote
// benchmark; the caller closes the daemon.
func remoteSetup() (limits, *daemon, string, error) {
	var l limits
	var err error
	if l.bw, l.rtt, err = loopbackTCP(); err != nil {
		return l, nil, "", err
	}
	if l.prtt, err = processRTT(); err != nil {
		return l, nil, "", err
	}
	d, addr, err := startDaemon()
	return l, d, addr, err
}

// daemon is a benchmark's daemon and the token file it wrote, where the
// script's add_remote_worker finds it.
type daemon struct {
	*remote.Daemon
	tokenPath string
}

func (d *daemon) Close() error {
	err := d.Daemon.Close()
	token.Remove(d.tokenPath)
	return err
}

// startDaemon serves remote level-3 sessions on a free loopback port, each
// a session process of this binary (`simpler __session`), until Close.
func startDaemon() (*daemon, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	path, tok, err := token.Generate(ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		ln.Close()
		return nil, "", err
	}
	d, err := remote.NewDaemon(ln, remote.DaemonConfig{Token: tok, Log: os.Stderr, Session: &engine.Launcher{Path: exe, Args: []string{"__session"}}})
	if err != nil {
		ln.Close()
		token.Remove(path)
		return nil, "", err
	}
	go d.Serve()
	return &daemon{d, path}, ln.Addr().String(), nil
}

// Remote prints the remote-node figures against loopback TCP measured in
// the same run: bulk copies against raw bandwidth, a no-op task against
// the round trip, and tasks per second.
func Remote(w io.Writer) (bool, error) {
	lim, d, addr, err := remoteSetup()
	if err != nil {
		return false, err
	}
	defer d.Close()
	bw, rtt, prtt := lim.bw, lim.rtt, lim.prtt

	dir, err := os.MkdirTemp("", "simpler-bench-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "remote.star")
	os.WriteFile(path, []byte(remoteScript), 0o600)
	os.WriteFile(filepath.Join(dir, "kernels.star"), []byte(remoteKernels), 0o600)
	var out bytes.Buffer
	s := starlib.NewSession("a2a3sim", nil, "thread", []string{addr}, &out, &out)
	err = s.RunFile(path)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("%s\n%s", starlib.Backtrace(err), out.String())
	}
	got := map[string]time.Duration{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		f := strings.Fields(line)
		var ns int64
		fmt.Sscan(f[len(f)-1], &ns)
		got[strings.Join(f[:len(f)-1], " ")] = time.Duration(ns)
	}
	c, err := measureCopies(addr)
	if err != nil {
		return false, err
	}
	one := got["run 1"]
	many := got["run 256"]
	fmt.Fprintf(w, "remote: one remote L3 node over 127.0.0.1 (a session process of a real daemon)\n")
	fmt.Fprintf(w, "  %-34s %8.2f GB/s   64-byte round trip %.1f us\n", "loopback TCP, raw, write side", bw/1e9, micros(rtt))
	fmt.Fprintf(w, "  %-34s %8.1f us (for scale; the target uses the one above)\n", "round trip between two processes", micros(prtt))
	fmt.Fprintf(w, "  %-34s %8.2f GB/s (median of %d; 64 MiB delivered and acknowledged)\n", "loopback TCP, raw, delivered", bulkBW(c.raw), len(c.raw))
	fmt.Fprintf(w, "  %-34s %8.2f GB/s\n", "remote_copy_to 64 MiB", bulkBW(c.to))
	fmt.Fprintf(w, "  %-34s %8.2f GB/s\n", "remote_copy_from 64 MiB", bulkBW(c.from))
	fmt.Fprintf(w, "  %-34s %8.1f us per run of one task\n", "remote no-op task", micros(one))
	fmt.Fprintf(w, "  %-34s %8.0f tasks/s (256 per run; up to %d in flight per node)\n", "many small remote tasks", 256/many.Seconds(), engine.RemoteDepth)
	ok := atLeast(w, "remote_copy_to / raw TCP", c.ratio(c.to), 0.9, "x")
	ok = atLeast(w, "remote_copy_from / raw TCP", c.ratio(c.from), 0.9, "x") && ok
	ok = verdict(w, "no-op task / TCP round trip", float64(one)/float64(rtt), 3, "x") && ok
	return ok, nil
}

// copyBytes is one bulk copy: the largest a single COPY_TO / COPY_FROM
// carries.
const copyBytes = wire.MaxCopy

// copyRounds is how many times each bulk figure is measured.
const copyRounds = 9

// copyTimes are the bulk figures, round by round: raw loopback TCP,
// remote_copy_to and remote_copy_from of copyBytes, measured one after
// the other in each round so that the load of the moment (other work on
// this machine) weighs on all three alike.
type copyTimes struct {
	raw, to, from []time.Duration
}

// ratio is the median over the rounds of raw's time over the copy's: the
// copy's bandwidth as a fraction of raw TCP's in the same round.
func (c copyTimes) ratio(copies []time.Duration) float64 {
	r := make([]float64, len(copies))
	for i := range copies {
		r[i] = float64(c.raw[i]) / float64(copies[i])
	}
	slices.Sort(r)
	return r[len(r)/2]
}

// bulkBW is the median bandwidth of copyBytes moved in each of times.
func bulkBW(times []time.Duration) float64 {
	t := slices.Clone(times)
	slices.Sort(t)
	return float64(copyBytes) / t[len(t)/2].Seconds() / 1e9
}

// measureCopies times copyRounds rounds of raw TCP, remote_copy_to and
// remote_copy_from (the Worker methods the script's builtins call) on a
// node of the daemon at addr.
func measureCopies(addr string) (c copyTimes, err error) {
	p, err := hal.Lookup("a2a3sim")
	if err != nil {
		return c, err
	}
	top, err := engine.NewWorker(engine.Config{Level: 4, Platform: p, Dial: remote.Dial})
	if err != nil {
		return c, err
	}
	defer func() {
		if cerr := top.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := top.AddRemoteWorker(engine.RemoteSpec{Endpoint: addr, Platform: "a2a3sim", DeviceIDs: []int{0}}); err != nil {
		return c, err
	}
	if err := top.Init(); err != nil {
		return c, err
	}
	bufs := remote.DirectIn(top.DirectIn(nil))
	h, err := bufs.Malloc(0, copyBytes)
	if err != nil {
		return c, err
	}
	defer remote.Free(h)
	raw, err := loopbulk.Dial(copyBytes)
	if err != nil {
		return c, err
	}
	defer raw.Close()
	host := make([]byte, copyBytes)
	for i := range host {
		host[i] = byte(i)
	}
	steps := []struct {
		times *[]time.Duration
		run   func() error
	}{
		{&c.raw, raw.Send},
		{&c.to, func() error { return bufs.CopyTo(h, host, 0) }},
		{&c.from, func() error { return bufs.CopyFrom(h, host, 0) }},
	}
	for i := -1; i < copyRounds; i++ { // round -1 warms up: first touches, socket buffers
		for _, s := range steps {
			start := time.Now()
			if err := s.run(); err != nil {
				return c, err
			}
			if i >= 0 {
				*s.times = append(*s.times, time.Since(start))
			}
		}
	}
	return c, nil
}
