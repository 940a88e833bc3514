package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"simpler/bench"
	"slices"
	"sort"
	"time"
)

// What --race costs, `simpler bench race`: every script of scripts/examples
// and tests/golden run as `simpler run NAME.star` in its directory, in
// thread mode, with and without --race, raceRounds times each, the two
// interleaved (the order alternating by round) so that load on a shared
// machine falls on both alike. Per script: the median wall time and the
// median peak RSS (the child's own high-water mark, bench.RunPeakRSS; processes it starts, such
// as a script's daemons, are not counted) of each; then the median over
// the scripts of the ratios, against the targets (at most 3x the
// time, 2x the memory).

const (
	raceRounds     = 5
	raceTimeTarget = 3.0
	raceMemTarget  = 2.0
)

// raceBenchDirs are the scripts measured, from the repository's root.
var raceBenchDirs = []string{"scripts/examples", "tests/golden"}

// raceSample is one run: its wall time and peak RSS in KiB.
type raceSample struct {
	wall time.Duration
	rss  int64
}

// raceScript is what one script measured, without and with --race.
type raceScript struct {
	path        string
	plain, race []raceSample
}

func benchRace(w io.Writer) (bool, error) {
	exe, err := os.Executable()
	if err != nil {
		return false, err
	}
	return measureRace(w, exe, raceBenchDirs, raceRounds)
}

// measureRace is benchRace over the scripts of dirs, with the simpler
// binary exe, rounds times each.
func measureRace(w io.Writer, exe string, dirs []string, rounds int) (bool, error) {
	scripts, err := raceBenchScripts(dirs)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(w, "race: simpler run with and without --race, thread mode, %d scripts of %v, %d rounds interleaved\n", len(scripts), dirs, rounds)
	for round := 0; round < rounds; round++ {
		for _, s := range scripts {
			if err := s.measure(exe, round%2 == 1); err != nil {
				return false, err
			}
		}
	}
	var timeRatios, memRatios []float64
	fmt.Fprintf(w, "  %-50s %9s %9s %6s %9s %9s %6s\n", "script", "ms", "race ms", "x", "MiB", "race MiB", "x")
	for _, s := range scripts {
		pt, pm := medianSample(s.plain)
		rt, rm := medianSample(s.race)
		tr := float64(rt) / float64(pt)
		mr := float64(rm) / float64(pm)
		timeRatios = append(timeRatios, tr)
		memRatios = append(memRatios, mr)
		fmt.Fprintf(w, "  %-50s %9.1f %9.1f %6.2f %9.1f %9.1f %6.2f\n", s.path,
			ms(pt), ms(rt), tr, float64(pm)/1024, float64(rm)/1024, mr)
	}
	okTime := raceVerdict(w, "median time ratio (--race / without)", medianFloat(timeRatios), raceTimeTarget)
	okMem := raceVerdict(w, "median peak RSS ratio (--race / without)", medianFloat(memRatios), raceMemTarget)
	fmt.Fprintf(w, "  %-50s %.2f x time, %.2f x memory\n", "worst script", slices.Max(timeRatios), slices.Max(memRatios))
	return okTime && okMem, nil
}

// raceBenchScripts are the scripts to measure, sorted by path.
func raceBenchScripts(dirs []string) ([]*raceScript, error) {
	var out []*raceScript
	for _, dir := range dirs {
		paths, err := filepath.Glob(filepath.Join(dir, "*.star"))
		if err != nil {
			return nil, err
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("race: no scripts in %s: run simpler bench race from the repository's root", dir)
		}
		for _, p := range paths {
			out = append(out, &raceScript{path: p})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out, nil
}

// measure runs s once without --race and once with it, raceFirst
// choosing which goes first.
func (s *raceScript) measure(exe string, raceFirst bool) error {
	for _, withRace := range []bool{raceFirst, !raceFirst} {
		got, err := runTimed(exe, s.path, withRace)
		if err != nil {
			return err
		}
		if withRace {
			s.race = append(s.race, got)
		} else {
			s.plain = append(s.plain, got)
		}
	}
	return nil
}

// runTimed runs `simpler run [--race] NAME.star` in the script's
// directory, as a script is meant to run, whatever its exit status (a
// golden script may fail on purpose).
func runTimed(exe, path string, withRace bool) (raceSample, error) {
	args := []string{"run"}
	if withRace {
		args = append(args, "--race")
	}
	cmd := exec.Command(exe, append(args, filepath.Base(path))...)
	cmd.Dir = filepath.Dir(path)
	start := time.Now()
	peak, err := bench.RunPeakRSS(cmd)
	wall := time.Since(start)
	if _, failed := err.(*exec.ExitError); err != nil && !failed {
		return raceSample{}, fmt.Errorf("race: %s: %v", path, err)
	}
	return raceSample{wall, peak >> 10}, nil
}

// medianSample is the median wall time and the median peak RSS of ss.
func medianSample(ss []raceSample) (time.Duration, int64) {
	walls := make([]float64, len(ss))
	rss := make([]float64, len(ss))
	for i, s := range ss {
		walls[i], rss[i] = float64(s.wall), float64(s.rss)
	}
	return time.Duration(medianFloat(walls)), int64(medianFloat(rss))
}

func medianFloat(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// raceVerdict prints a ratio beside its target, as the other benchmarks
// print theirs.
func raceVerdict(w io.Writer, what string, got, target float64) bool {
	ok := got <= target
	mark := "ok"
	if !ok {
		mark = "OVER TARGET"
	}
	fmt.Fprintf(w, "  %-50s %.2f x (target <= %.2f) %s\n", what, got, target, mark)
	return ok
}
