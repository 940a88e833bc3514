package starlib

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"go.starlark.net/starlark"
)

// TestStdlibScripts runs every stdlib/testdata/*_test.star in this process:
// the script's main(ctx) on a session of four simulated chips in thread
// mode, once per simulated architecture (a5sim has data types a2a3sim
// lacks). A script checks its own results with assert; a failed assertion
// or any other error fails the test with the script's backtrace. The
// scripts test the embedded library from the inside, e.g. each kernel of
// collective_kernels.star on its own, which golden scripts going through
// collectives.star cannot single out.
func TestStdlibScripts(t *testing.T) {
	scripts, err := filepath.Glob(filepath.Join("stdlib", "testdata", "*_test.star"))
	if err != nil {
		t.Fatal(err)
	}
	if len(scripts) == 0 {
		t.Fatal("no stdlib/testdata/*_test.star scripts")
	}
	for _, script := range scripts {
		name := strings.TrimSuffix(filepath.Base(script), ".star")
		for _, platform := range []string{"a2a3sim", "a5sim"} {
			t.Run(name+"/"+platform, func(t *testing.T) {
				t.Parallel() // sessions share nothing
				var out bytes.Buffer
				s := NewSession(platform, []int{0, 1, 2, 3}, "thread", nil, &out, &out)
				err := s.RunFile(script)
				if cerr := s.Close(); cerr != nil {
					t.Errorf("session close: %v", cerr)
				}
				if err != nil {
					var ee *starlark.EvalError
					if errors.As(err, &ee) {
						t.Fatalf("%s\noutput:\n%s", ee.Backtrace(), out.String())
					}
					t.Fatalf("%v\noutput:\n%s", err, out.String())
				}
				t.Logf("%s", out.String())
			})
		}
	}
}
