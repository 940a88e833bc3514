package bench

import (
	"fmt"
	"io"
	"time"
)

// collFigures are what the table is made of, all from one run.
type collFigures struct {
	pts, procPts []collPoint
	memcpy       float64     // bytes per second
	peer         *mpiFigures // nil: Open MPI not measured
	domain       time.Duration
}

// find is the median of allreduce algo over n ranks at size bytes, or 0.
func find(pts []collPoint, algo string, n, size int) time.Duration {
	for _, p := range pts {
		if p.name == "allreduce" && p.algo == algo && p.ranks == n && p.size == size {
			return p.t
		}
	}
	return 0
}

// busPerMemcpy is an allreduce's busbw over memcpy's bandwidth.
func (f collFigures) busPerMemcpy(t time.Duration, n, size int) float64 {
	if t <= 0 {
		return 0
	}
	return float64(size) / t.Seconds() * busFactor("allreduce", n) / f.memcpy
}

// peerAllreduce is Open MPI's median, or 0 when it was not measured.
func (f collFigures) peerAllreduce(n, size int) time.Duration {
	if f.peer == nil {
		return 0
	}
	return f.peer.allreduce[n][size]
}

// table prints the table: each figure, simpler's median, Open
// MPI's from the same run, the limit, the goal and whether it was met.
// It reports whether every goal was met; a goal that needs the peer and
// has none is printed as not checked.
func (f collFigures) table(w io.Writer) bool {
	const small, big = 4 << 10, 64 << 20
	fmt.Fprintf(w, "  issue 16: medians from this run (algo \"auto\", the default)\n")
	fmt.Fprintf(w, "  %-52s %12s %12s %7s %-22s %s\n", "figure", "simpler", "Open MPI", "limit", "goal", "")
	ok := true
	for _, c := range []struct {
		n      int
		factor float64
	}{{4, 2.5}, {2, 6}} {
		t := find(f.pts, "auto", c.n, small)
		peer := f.peerAllreduce(c.n, small)
		verdict, _, met := againstPeer(t, peer, c.factor)
		ok = ok && met
		f.row(w, fmt.Sprintf("4 KiB allreduce, %d ranks, thread mode", c.n), us(t), us(peer), "-", fmt.Sprintf("<= %.1f x Open MPI", c.factor), verdict)
	}
	for _, c := range []struct {
		n           int
		limit, goal float64
	}{{4, 0.375, 0.30}, {2, 0.5, 0.45}} {
		got := f.busPerMemcpy(find(f.pts, "auto", c.n, big), c.n, big)
		peer := "-"
		if t := f.peerAllreduce(c.n, big); t > 0 {
			peer = fmt.Sprintf("%.3f", f.busPerMemcpy(t, c.n, big))
		}
		met := got >= c.goal
		ok = ok && met
		f.row(w, fmt.Sprintf("64 MiB allreduce busbw / memcpy, %d ranks, thread mode", c.n), fmt.Sprintf("%.3f", got), peer,
			fmt.Sprintf("%.3f", c.limit), fmt.Sprintf(">= %.2f", c.goal), metOrMissed(met, ""))
	}
	win := "-"
	if f.peer != nil && f.peer.window[4] > 0 {
		win = us(f.peer.window[4]) + " (window)"
	}
	met := f.domain <= 10*time.Microsecond
	ok = ok && met
	f.row(w, "domain allocate + release in one collective call, 4 ranks", us(f.domain), win, "-", "<= 10 us", metOrMissed(met, ""))
	t := find(f.procPts, "auto", 4, small)
	f.row(w, "4 KiB allreduce, 4 ranks, process mode", us(t), us(f.peerAllreduce(4, small)), "-", "(reported)", "")
	got := f.busPerMemcpy(find(f.procPts, "auto", 4, big), 4, big)
	f.row(w, "64 MiB allreduce busbw / memcpy, 4 ranks, process mode", fmt.Sprintf("%.3f", got), "-", "0.375", "(reported)", "")
	if !ok {
		fmt.Fprintf(w, "  issue 16: a goal was MISSED (see above); the exit code reports only failures to run\n")
	}
	return f.windowTable(w) && ok
}

// windowAlgos are allreduce's window algorithms: what a script that names
// one gets through a communication domain (issue 28), where "auto" on
// host tensors takes direct, which reads every rank's tensors in place.
var windowAlgos = []string{"onephase", "twophase", "ring", "bidirectional_ring"}

// bestWindow is the fastest window algorithm's median of allreduce over n
// ranks at size bytes, and its name; 0 if none was measured.
func bestWindow(pts []collPoint, n, size int) (string, time.Duration) {
	best, bt := "", time.Duration(0)
	for _, a := range windowAlgos {
		if t := find(pts, a, n, size); t > 0 && (bt == 0 || t < bt) {
			best, bt = a, t
		}
	}
	return best, bt
}

// windowTable prints issue 28's rows: the best window algorithm, named,
// against Open MPI and memcpy from the same run. It reports whether every
// goal was met (one that needs the peer and has none is not checked).
func (f collFigures) windowTable(w io.Writer) bool {
	const small, big = 4 << 10, 64 << 20
	fmt.Fprintf(w, "  issue 28: medians from this run, best window algorithm from a script (direct above is the floor)\n")
	fmt.Fprintf(w, "  %-52s %12s %12s %7s %-22s %s\n", "figure", "simpler", "Open MPI", "limit", "goal", "")
	ok := true
	for _, c := range []struct {
		n      int
		factor float64
		figure string
	}{{2, 10, RowAllreduce2}, {4, 2, RowAllreduce4}} {
		algo, t := bestWindow(f.pts, c.n, small)
		peer := f.peerAllreduce(c.n, small)
		verdict, ratio, met := againstPeer(t, peer, c.factor)
		ok = ok && met
		if peer > 0 {
			noteRow(Row{Figure: c.figure, Value: fmt.Sprintf("%s, %s (%s, Open MPI %s)", ratio, us(t), algo, us(peer)), Met: met})
		}
		f.row(w, fmt.Sprintf("4 KiB allreduce, %d ranks, %s", c.n, algo), us(t), us(peer), "-", fmt.Sprintf("<= %g x Open MPI", c.factor), verdict)
	}
	for _, c := range []struct {
		n           int
		limit, goal float64
		figure      string
	}{{2, 0.5, 0.45, RowBusbw2}, {4, 0.375, 0.30, RowBusbw4}} {
		algo, t := bestWindow(f.pts, c.n, big)
		got := f.busPerMemcpy(t, c.n, big)
		met := got >= c.goal
		ok = ok && met
		noteRow(Row{Figure: c.figure, Value: fmt.Sprintf("%.3f (%s)", got, algo), Met: met})
		f.row(w, fmt.Sprintf("64 MiB allreduce busbw / memcpy, %d ranks, %s", c.n, algo), fmt.Sprintf("%.3f", got), "-",
			fmt.Sprintf("%.3f", c.limit), fmt.Sprintf(">= %.2f", c.goal), metOrMissed(met, ""))
	}
	if !ok {
		fmt.Fprintf(w, "  issue 28: a goal was MISSED (see above); the exit code reports only failures to run\n")
	}
	return ok
}

// againstPeer compares t with factor times Open MPI's peer from the same
// run: the verdict printed, the ratio, and whether it was met (a goal
// with no peer is not checked, and does not fail the table).
func againstPeer(t, peer time.Duration, factor float64) (verdict, ratio string, met bool) {
	if peer <= 0 {
		return "not checked (no peer)", "", true
	}
	ratio = fmt.Sprintf("%.2f x", float64(t)/float64(peer))
	met = t > 0 && float64(t) <= factor*float64(peer)
	return metOrMissed(met, ratio), ratio, met
}

func (f collFigures) row(w io.Writer, what, simpler, peer, limit, goal, verdict string) {
	fmt.Fprintf(w, "  %-52s %12s %12s %7s %-22s %s\n", what, simpler, peer, limit, goal, verdict)
}

// us formats a duration in microseconds; 0 (not measured) is "-".
func us(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f us", micros(d))
}

func metOrMissed(met bool, detail string) string {
	s := "met"
	if !met {
		s = "MISSED"
	}
	if detail != "" {
		s += " (" + detail + ")"
	}
	return s
}
