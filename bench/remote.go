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
	rtts, err := roundTrips(c, 401)
	if err == nil {
		rtt = mid(rtts)
		loopbackP99 = percentile(rtts, 99)
	}
	c.Close()
	if e := <-errc; err == nil {
		err = e
	}
	return float64(bulk) / best.Seconds(), rtt, err
}

// loopbackP99 is the last loopbackTCP's 99th percentile round trip, for
// scale beside a remote task's p99.
var loopbackP99 time.Duration

// roundTrips times n 64-byte round trips over c, whose peer echoes.
func roundTrips(c net.Conn, n int) ([]time.Duration, error) {
	ping := make([]byte, 64)
	ds := make([]time.Duration, n)
	for i := range ds {
		start := time.Now()
		if _, err := c.Write(ping); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(c, ping); err != nil {
			return nil, err
		}
		ds[i] = time.Since(start)
	}
	return ds, nil
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
    one = TaskArgs(scalars = [1])
    for r in range(int(ctx.argv[1])):
        start = time.now()
        w.run(orch, one)
        print("one", (time.now() - start).nanoseconds)
    times = []
    for r in range(5):
        start = time.now()
        w.run(orch, TaskArgs(scalars = [256]))
        times.append((time.now() - start).nanoseconds)
    print("many", sorted(times)[2])
    w.close()
`

// remoteOnes is how many single-task runs the script times: enough for a
// p99 that is not the slowest run alone.
const remoteOnes = 401

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
	s := starlib.NewSession("a2a3sim", nil, "thread", []string{addr, fmt.Sprint(remoteOnes)}, &out, &out)
	err = s.RunFile(path)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("%s\n%s", starlib.Backtrace(err), out.String())
	}
	ones, many, err := parseRemote(out.String())
	if err != nil {
		return false, err
	}
	c, err := measureCopies(addr)
	if err != nil {
		return false, err
	}
	p50, p99 := percentile(ones, 50), percentile(ones, 99)
	fmt.Fprintf(w, "remote: one remote L3 node over 127.0.0.1 (a session process of a real daemon)\n")
	fmt.Fprintf(w, "  %-34s %8.2f GB/s   64-byte round trip %.1f us (p99 %.1f us)\n", "loopback TCP, raw, write side", bw/1e9, micros(rtt), micros(loopbackP99))
	fmt.Fprintf(w, "  %-34s %8.1f us (for scale; the target uses the one above)\n", "round trip between two processes", micros(prtt))
	fmt.Fprintf(w, "  %-34s %8.2f GB/s (median of %d; 64 MiB delivered and acknowledged)\n", "loopback TCP, raw, delivered", bulkBW(c.raw), len(c.raw))
	fmt.Fprintf(w, "  %-34s %8.2f GB/s\n", "remote_copy_to 64 MiB", bulkBW(c.to))
	fmt.Fprintf(w, "  %-34s %8.2f GB/s\n", "remote_copy_from 64 MiB", bulkBW(c.from))
	fmt.Fprintf(w, "  %-34s %8.1f us p50, %.1f us p99 (%d runs of one task from the script, each timed by its w.run)\n", "remote no-op task", micros(p50), micros(p99), len(ones))
	fmt.Fprintf(w, "  %-34s %8.0f tasks/s (256 per run; up to %d in flight per node)\n", "many small remote tasks", 256/many.Seconds(), engine.RemoteDepth)
	ok := atLeast(w, "remote_copy_to / raw TCP", c.ratio(c.to), 0.9, "x")
	ok = atLeast(w, "remote_copy_from / raw TCP", c.ratio(c.from), 0.9, "x") && ok
	p50ok := verdict(w, "no-op task p50 / TCP round trip", float64(p50)/float64(rtt), 3, "x")
	p99ok := verdict(w, "no-op task p99 / its p50", float64(p99)/float64(p50), 10, "x")
	noteRow(Row{Figure: RowRemote, Met: p50ok && p99ok, Value: fmt.Sprintf("p50 %.2f x (%.1f us, round trip %.1f us), p99 %.1f x p50 (%.1f us)",
		float64(p50)/float64(rtt), micros(p50), micros(rtt), float64(p99)/float64(p50), micros(p99))})
	return ok && p50ok && p99ok, nil
}

// parseRemote reads the remote script's output: a "one NS" line per run
// of one task, then "many NS", the median run of 256.
func parseRemote(out string) (ones []time.Duration, many time.Duration, err error) {
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var name string
		var ns int64
		if _, e := fmt.Sscan(line, &name, &ns); e != nil {
			return nil, 0, fmt.Errorf("remote script printed %q", line)
		}
		switch name {
		case "one":
			ones = append(ones, time.Duration(ns))
		case "many":
			many = time.Duration(ns)
		}
	}
	if len(ones) != remoteOnes || many <= 0 {
		return nil, 0, fmt.Errorf("remote script printed %d single runs (want %d) and many %v:\n%s", len(ones), remoteOnes, many, out)
	}
	return ones, many, nil
}

// percentile is the p-th percentile of ds (nearest rank), which it sorts.
func percentile(ds []time.Duration, p int) time.Duration {
	slices.Sort(ds)
	i := (len(ds)*p + 99) / 100 // the smallest rank covering p%
	return ds[max(i-1, 0)]
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
