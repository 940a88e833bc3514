package hostport

import (
	"net"
	"testing"

	"simpler/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

var samples = []string{
	"127.0.0.1:7700", "localhost:80", "[::1]:80", "[::1%lo]:0", "host:", ":80", ":", "",
	"nowhere", "a:b:c", "::1:80", "[::1]", "[::1]80", "[::1]:80:90", "[::1", "::1]:80",
	"a[b:80", "a]b:80", "[a]b]:80", "[[a]:80", "[a]:8]0", "[]:80", "[:80", "]:80",
}

// Split agrees with net.SplitHostPort on every sample: host, port, and
// whether it fails.
func TestSplitAgreesWithNet(t *testing.T) {
	for _, s := range samples {
		agree(t, s)
	}
}

func FuzzSplit(f *testing.F) {
	for _, s := range samples {
		f.Add(s)
	}
	f.Fuzz(agree)
}

func agree(t *testing.T, s string) {
	host, port, err := Split(s)
	wantHost, wantPort, wantErr := net.SplitHostPort(s)
	if host != wantHost || port != wantPort || (err == nil) != (wantErr == nil) {
		t.Fatalf("Split(%q) = %q, %q, %v; net.SplitHostPort gives %q, %q, %v", s, host, port, err, wantHost, wantPort, wantErr)
	}
	if err != nil && err.Error() != wantErr.Error() {
		t.Fatalf("Split(%q): %v; net says %v", s, err, wantErr)
	}
}
