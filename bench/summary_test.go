package bench

import (
	"strings"
	"testing"
	"time"
)

// TestSummary: every row of the table is printed with its target;
// a noted row says met or MISSED with its value, and a missed one makes
// the table report false; a row nobody noted names the part that
// measures it.
func TestSummary(t *testing.T) {
	clearRows := func() {
		noted.Lock()
		noted.rows = nil
		noted.Unlock()
	}
	clearRows() // other tests of the package note rows (the collectives table's)
	t.Cleanup(clearRows)
	noteRow(Row{Figure: RowProcessMarginal, Met: true, Value: "6.50 us"})
	var b strings.Builder
	if !Summary(&b) {
		t.Errorf("a table whose only row was met reports a miss:\n%s", b.String())
	}
	out := b.String()
	for _, want := range []string{
		RowAllreduce2, "<= 10 x Open MPI", "not measured (simpler bench collectives)",
		RowPod, "not measured (simpler bench pod)",
		"met (6.50 us)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	noteRow(Row{Figure: RowRemote, Met: false, Value: "p99 40 x p50"})
	b.Reset()
	if Summary(&b) {
		t.Errorf("a table with a missed row reports every target met:\n%s", b.String())
	}
	if !strings.Contains(b.String(), "MISSED (p99 40 x p50)") {
		t.Errorf("the missed row is not marked:\n%s", b.String())
	}
}

// TestPercentile: nearest rank, so p99 of 100 samples is the 99th, and
// of 401 the 397th; p50 of an odd count is the median.
func TestPercentile(t *testing.T) {
	ds := func(n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = time.Duration(n - i) // reversed: percentile sorts
		}
		return out
	}
	for _, c := range []struct {
		n, p int
		want time.Duration
	}{{100, 99, 99}, {401, 99, 397}, {401, 50, 201}, {1, 99, 1}, {3, 50, 2}} {
		if got := percentile(ds(c.n), c.p); got != c.want {
			t.Errorf("percentile of 1..%d at %d: %v, want %v", c.n, c.p, got, c.want)
		}
	}
}

// TestParseRuns: the pod script's runs are read in order, other lines
// skipped; a missing run is an error.
func TestParseRuns(t *testing.T) {
	out := "run 5\nsomething else\nrun 3\nrun 4\nrun 9\n"
	runs, err := parseRuns(out)
	if err != nil {
		t.Fatal(err)
	}
	if runs[0] != 5 || runs[3] != 9 {
		t.Errorf("runs %v", runs)
	}
	if _, err := parseRuns("run 1\nrun 2\n"); err == nil {
		t.Error("two runs of four accepted")
	}
}
