package bench

import (
	"strings"
	"testing"
	"time"

	"simpler/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// TestMPIPeerParse: the peer's ROW and WIN lines give the medians;
// mpirun's own lines are skipped; a line for another rank count, a
// failed self-check or a bad number is an error.
func TestMPIPeerParse(t *testing.T) {
	f := &mpiFigures{allreduce: map[int]map[int]time.Duration{}, window: map[int]time.Duration{}}
	out := "some mpirun warning\n" +
		"ROW op=allreduce np=4 bytes=4096 iters=660 trials=9 us=52.48 us_min=46.90 us_max=938.29 algbw=0.0780 busbw=0.1171 ok=1\n" +
		"ROW op=allreduce np=4 bytes=67108864 iters=2 trials=9 us=201543.47 us_min=1 us_max=2 algbw=0.3 busbw=0.5 ok=1\n" +
		"WIN np=4 bytes=4096 reps=21 alloc_us=300.5 free_us=44.5 alloc_free_us=345.0 alloc_touch_free_us=372.6\n"
	if err := f.parse(4, []byte(out)); err != nil {
		t.Fatal(err)
	}
	if got := f.allreduce[4][4096]; got != 52480*time.Nanosecond {
		t.Errorf("4 KiB: %v", got)
	}
	if got := f.allreduce[4][64<<20]; got != time.Duration(201543.47*float64(time.Microsecond)) {
		t.Errorf("64 MiB: %v", got)
	}
	if got := f.window[4]; got != 345*time.Microsecond {
		t.Errorf("window: %v", got)
	}
	for _, c := range []struct{ line, want string }{
		{"ROW op=allreduce np=2 bytes=4096 us=1 ok=1", "for 4 ranks"},
		{"ROW op=allreduce np=4 bytes=4096 us=1 ok=0", "own check failed"},
		{"ROW op=allreduce np=4 bytes=4096 us=-1 ok=1", "bad us"},
		{"ROW op=allreduce np=4 bytes=0 us=1 ok=1", "bad bytes"},
		{"ROW op=allreduce np=4 bytes=4096 us=NaN ok=1", "bad us"},
		{"WIN np=4 bytes=4096 alloc_free_us=x", "bad alloc_free_us"},
		{"nothing here", "no figures"},
	} {
		g := &mpiFigures{allreduce: map[int]map[int]time.Duration{}, window: map[int]time.Duration{}}
		if err := g.parse(4, []byte(c.line)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.line, err, c.want)
		}
	}
}

// FuzzMPIPeerParse: any output parses to figures or an error, never a
// panic, and every figure kept is a positive size and a bounded time.
func FuzzMPIPeerParse(f *testing.F) {
	f.Add([]byte("ROW op=allreduce np=4 bytes=4096 us=52.48 ok=1\nWIN np=4 bytes=4096 alloc_free_us=345.0\n"))
	f.Add([]byte("ROW np=4 bytes=99999999999999999999 us=1e308 ok=1"))
	f.Fuzz(func(t *testing.T, out []byte) {
		g := &mpiFigures{allreduce: map[int]map[int]time.Duration{}, window: map[int]time.Duration{}}
		if g.parse(4, out) != nil {
			return
		}
		for size, d := range g.allreduce[4] {
			if size <= 0 || d < 0 || d > 1e9*time.Microsecond {
				t.Fatalf("kept size %d time %v", size, d)
			}
		}
	})
}
