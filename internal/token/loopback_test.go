package token

import (
	"net"
	"strings"
	"testing"
)

var loopbackSamples = []string{"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1", "localhost", "LocalHost",
	"0.0.0.0", "10.0.0.1", "::", "::2", "fe80::1%lo", "::1%lo", "127.000.000.001", "", "example.com", "[::1]"}

// isLoopback parses with netip, so that the engine, which checks tokens,
// links no network stack; it must agree with net.ParseIP's IsLoopback.
func TestIsLoopbackAgreesWithNet(t *testing.T) {
	for _, h := range loopbackSamples {
		loopbackAgrees(t, h)
	}
}

func FuzzIsLoopback(f *testing.F) {
	for _, h := range loopbackSamples {
		f.Add(h)
	}
	f.Fuzz(loopbackAgrees)
}

func loopbackAgrees(t *testing.T, host string) {
	ip := net.ParseIP(host)
	want := strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback()
	if got := isLoopback(host); got != want {
		t.Fatalf("isLoopback(%q) = %v; by net.ParseIP it is %v", host, got, want)
	}
}
