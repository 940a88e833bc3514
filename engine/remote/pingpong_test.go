package remote

import (
	"net"
	"os"
	"os/exec"
	"sort"
	"testing"
	"time"

	"simpler/internal/netspin"
	"simpler/wire"
)

// echoEnv makes the test binary an echo process (runEcho): the far end of
// the raw ping-pong the command round trip is compared with.
const echoEnv = "SIMPLER_REMOTE_TEST_ECHO"

// echoSpinEnv is how long the echo process's reads spin.
const echoSpinEnv = "SIMPLER_REMOTE_TEST_ECHO_SPIN"

// runEcho dials the address in echoEnv and sends back every frame it reads
// (read as the session reads: netspin, header then payload) until EOF.
func runEcho() int {
	c, err := net.Dial("tcp", os.Getenv(echoEnv))
	if err != nil {
		return 1
	}
	defer c.Close()
	spin, _ := time.ParseDuration(os.Getenv(echoSpinEnv))
	in := netspin.NewReader(c, spin)
	for {
		h, p, err := wire.ReadFrame(in, wire.MaxPayload)
		if err != nil {
			return 0
		}
		if err := wire.WriteFrame(c, h, p); err != nil {
			return 1
		}
	}
}

// startEcho starts an echo process and returns the connection to it.
func startEcho(b *testing.B, spin time.Duration) net.Conn {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	exe, _ := os.Executable()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), echoEnv+"="+ln.Addr().String(), echoSpinEnv+"="+spin.String())
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(); cmd.Wait() })
	return c
}

// BenchmarkRawPingPong is a 64-byte frame to another process and back over
// loopback TCP, each end reading with netspin (spin 0: a plain blocking
// read): what BenchmarkRemoteControl's round trip costs without the node,
// the session and the command around it.
func BenchmarkRawPingPong(b *testing.B) {
	for _, sp := range []struct {
		name      string
		near, far time.Duration
	}{{"block-block", 0, 0}, {"spin-block", netspin.DefaultSpin, 0}, {"spin-spin", netspin.DefaultSpin, netspin.DefaultSpin}} {
		b.Run(sp.name, func(b *testing.B) { pingPong(b, sp.near, sp.far) })
	}
}

func pingPong(b *testing.B, near, far time.Duration) {
	c := startEcho(b, far)
	in := netspin.NewReader(c, near)
	h := wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeHealth, Session: 1, Worker: 0, Seq: 1}
	payload := make([]byte, 64-wire.HeaderSize)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := wire.WriteFrame(c, h, payload); err != nil {
			b.Fatal(err)
		}
		if _, _, err := wire.ReadFrame(in, wire.MaxPayload); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	reportMedian(b, lat)
}

// reportMedian adds the median and 90th percentile of lat to b's report.
func reportMedian(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*9/10].Nanoseconds()), "p90-ns")
}
