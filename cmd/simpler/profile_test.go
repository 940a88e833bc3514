package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunCPUProfile checks that --cpuprofile writes a profile pprof reads
// (gzip-compressed protocol buffers) of a whole run, that a file it cannot
// create is a usage error before the script runs, and that a script's
// header cannot set it.
func TestRunCPUProfile(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"busy.star": "def main(ctx):\n    n = 0\n    for i in range(200000):\n        n += i\n    print(n)\n",
		"hdr.star":  "# simpler-args: --cpuprofile=h.prof\ndef main(ctx):\n    print(1)\n",
	})
	code, out, stderr := runChild(t, dir, "run", "--cpuprofile", "p.prof", "busy.star")
	if code != 0 || out != "19999900000\n" {
		t.Fatalf("exit %d: %q %s", code, out, stderr)
	}
	b, err := os.ReadFile(filepath.Join(dir, "p.prof"))
	if err != nil || len(b) < 64 || !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Fatalf("the profile is %d bytes (%v), not a gzip-compressed profile", len(b), err)
	}
	code, out, stderr = runChild(t, dir, "run", "--cpuprofile", filepath.Join(dir, "no", "such", "p.prof"), "busy.star")
	if code != 2 || out != "" || !strings.Contains(stderr, "--cpuprofile") {
		t.Fatalf("an uncreatable profile: exit %d, %q, %s", code, out, stderr)
	}
	code, _, stderr = runChild(t, dir, "run", "hdr.star")
	if code == 0 || !strings.Contains(stderr, "--cpuprofile is for the command line only") {
		t.Fatalf("a header setting --cpuprofile: exit %d, %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "h.prof")); err == nil {
		t.Fatal("the header's profile was written")
	}
}
