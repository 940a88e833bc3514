package remote

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"simpler/engine"
	"simpler/wire"
)

// rendezvous is the decision logic of a group's start-up, a plain state
// machine with no I/O, so that tests step it: which ranks have claimed
// their place, which are up, what was refused, and whether the start-up
// has failed. All or nothing: the first fatal step decides the error and
// nothing joins after it.
type rendezvous struct {
	name    string // "worker group 0"
	spec    engine.GroupSpec
	timeout time.Duration // the start-up bound, for messages
	claimed []string      // by rank: who claimed it ("rank 1 (pid 7 on host h, 10.0.0.2:5000)"), "" if nobody
	up      []bool
	refused []string // connections turned away (bad proofs, repeats), in order, for the error
	fatal   error
}

func newRendezvous(name string, spec engine.GroupSpec, timeout time.Duration) *rendezvous {
	return &rendezvous{name: name, spec: spec, timeout: timeout, claimed: make([]string, spec.Ranks), up: make([]bool, spec.Ranks)}
}

// maxRefusals bounds the refusals kept for the error.
const maxRefusals = 8

// refuse records a connection turned away without failing the start-up:
// a wrong proof, a rank already taken. It returns why, for the peer.
func (z *rendezvous) refuse(from, why string) string {
	if len(z.refused) < maxRefusals {
		z.refused = append(z.refused, fmt.Sprintf("%s: %s", from, why))
	}
	return why
}

// claim is a rank that proved the token: it may come up (nil), or is
// refused. A rank the group does not have, or one that offers the wrong
// platform or devices, fails the start-up (the launcher placed what the
// group cannot use); a rank claimed twice only turns the second away.
func (z *rendezvous) claim(j wire.Join, who string) error {
	if z.fatal != nil {
		return z.fatal
	}
	switch {
	case j.Rank >= z.spec.Ranks:
		z.fatal = engine.Errorf(engine.ValueError, "%s: %s: the group has ranks 0..%d (a launcher started more than ranks=%d?)", z.name, who, z.spec.Ranks-1, z.spec.Ranks)
		return z.fatal
	case z.claimed[j.Rank] != "":
		return engine.Errorf(engine.ValueError, "%s", z.refuse(who, fmt.Sprintf("rank %d has already joined (%s)", j.Rank, z.claimed[j.Rank])))
	case j.Platform != z.spec.Platform:
		z.fatal = engine.Errorf(engine.ValueError, "%s: %s announced platform %s; the group's is %s", z.name, who, j.Platform, z.spec.Platform)
		return z.fatal
	}
	if len(j.DeviceIDs) > 0 {
		for _, d := range z.spec.DeviceIDs {
			if !slices.Contains(j.DeviceIDs, d) {
				z.fatal = engine.Errorf(engine.ValueError, "%s: %s offers devices %s; the group needs %s", z.name, who, engine.FormatInts(j.DeviceIDs), engine.FormatInts(z.spec.DeviceIDs))
				return z.fatal
			}
		}
	}
	z.claimed[j.Rank] = who
	return nil
}

// ready records rank's node up (err nil), or failed to come up: that
// fails the start-up.
func (z *rendezvous) ready(rank int, err error) {
	if z.fatal != nil {
		return
	}
	if err != nil {
		z.fatal = engine.Wrap(err, fmt.Sprintf("%s: %s did not come up", z.name, z.claimed[rank]))
		return
	}
	z.up[rank] = true
}

// launcherExited fails the start-up: the launcher ended before every rank
// was up. output is its last lines.
func (z *rendezvous) launcherExited(launcher, status, output string) {
	if z.fatal == nil {
		z.fatal = engine.Errorf(engine.RuntimeError, "%s: %s %s before %s joined%s", z.name, launcher, status, z.missingText(), z.notes(output))
	}
}

// expired fails the start-up: the bound passed with ranks missing.
func (z *rendezvous) expired(output string) {
	if z.fatal == nil {
		z.fatal = engine.Errorf(engine.TimeoutError, "%s: %s did not join within startup_timeout_s=%v%s", z.name, z.missingText(), z.timeout.Seconds(), z.notes(output))
	}
}

// done reports whether the start-up is over: failed, or every rank up.
func (z *rendezvous) done() bool { return z.fatal != nil || !slices.Contains(z.up, false) }

// missing are the ranks not up, in order.
func (z *rendezvous) missing() []int {
	var m []int
	for r, up := range z.up {
		if !up {
			m = append(m, r)
		}
	}
	return m
}

// missingText names the missing ranks: "rank 1 of 3", "ranks 0, 2 of 3".
func (z *rendezvous) missingText() string {
	m := z.missing()
	s := make([]string, len(m))
	for i, r := range m {
		s[i] = fmt.Sprint(r)
	}
	word := "rank"
	if len(m) > 1 {
		word = "ranks"
	}
	return fmt.Sprintf("%s %s of %d", word, strings.Join(s, ", "), z.spec.Ranks)
}

// notes is what a start-up failure adds: the connections refused and the
// launcher's last lines.
func (z *rendezvous) notes(output string) string {
	var b strings.Builder
	if len(z.refused) > 0 {
		b.WriteString("; refused: " + strings.Join(z.refused, "; "))
	}
	if output != "" {
		b.WriteString("; the launcher's last lines:" + output)
	}
	return b.String()
}
