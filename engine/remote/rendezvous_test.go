package remote

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"simpler/engine"
	"simpler/wire"
)

func join(rank int, platform string, devices ...int) wire.Join {
	return wire.Join{Rank: rank, Platform: platform, DeviceIDs: devices}
}

// The rendezvous, stepped: all or nothing, the first fatal step decides.
func TestRendezvousSteps(t *testing.T) {
	spec := engine.GroupSpec{Ranks: 3, Platform: "a2a3sim", DeviceIDs: []int{0, 1}}
	z := newRendezvous("worker group 0", spec, 30*time.Second)
	if z.done() || !slices.Equal(z.missing(), []int{0, 1, 2}) {
		t.Fatalf("fresh: done %v, missing %v", z.done(), z.missing())
	}
	if err := z.claim(join(1, "a2a3sim"), "rank 1 (a)"); err != nil { // no devices named: the group's
		t.Fatal(err)
	}
	if err := z.claim(join(1, "a2a3sim"), "rank 1 (b)"); err == nil || !strings.Contains(err.Error(), "rank 1 has already joined (rank 1 (a))") || z.fatal != nil {
		t.Errorf("a repeated rank: %v, fatal %v", err, z.fatal)
	}
	z.refuse("10.0.0.9:4000", "JOIN: the token proof does not match")
	if err := z.claim(join(0, "a2a3sim", 0, 1, 2), "rank 0"); err != nil {
		t.Fatal(err)
	}
	z.ready(0, nil)
	z.ready(1, nil)
	if z.done() || !slices.Equal(z.missing(), []int{2}) {
		t.Fatalf("two up: done %v, missing %v", z.done(), z.missing())
	}
	z.expired("\n    mpirun: oops")
	err := z.fatal
	if !z.done() || engine.KindOf(err) != engine.TimeoutError {
		t.Fatalf("expired: %v", err)
	}
	for _, want := range []string{"worker group 0: rank 2 of 3 did not join within startup_timeout_s=30", "refused: rank 1 (b): rank 1 has already joined",
		"10.0.0.9:4000: JOIN: the token proof does not match", "the launcher's last lines:\n    mpirun: oops"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("expired error does not say %q:\n%v", want, err)
		}
	}
	// Nothing changes the verdict after it.
	z.launcherExited("mpirun", "exited with status 1", "")
	z.ready(2, nil)
	if z.fatal != err || z.claim(join(2, "a2a3sim"), "rank 2") != err {
		t.Error("a step after the verdict changed it")
	}

	fatal := []struct {
		j    wire.Join
		want string
	}{
		{join(3, "a2a3sim"), "rank 3: the group has ranks 0..2"},
		{join(0, "a5sim"), "announced platform a5sim; the group's is a2a3sim"},
		{join(0, "a2a3sim", 1, 2), "offers devices [1, 2]; the group needs [0, 1]"},
	}
	for _, c := range fatal {
		z := newRendezvous("g", spec, time.Second)
		if err := z.claim(c.j, fmt.Sprintf("rank %d", c.j.Rank)); err == nil || !strings.Contains(err.Error(), c.want) || z.fatal == nil || engine.KindOf(err) != engine.ValueError {
			t.Errorf("%+v: %v", c.j, err)
		}
	}
	z = newRendezvous("g", spec, time.Second)
	z.claim(join(0, "a2a3sim"), "rank 0")
	z.ready(0, engine.Errorf(engine.RuntimeError, "the daemon refused the session"))
	if z.fatal == nil || !strings.Contains(z.fatal.Error(), "g: rank 0 did not come up: the daemon refused the session") {
		t.Errorf("a node that failed: %v", z.fatal)
	}
	z = newRendezvous("g", spec, time.Second)
	z.launcherExited("mpirun", "exited with status 1", "")
	if z.fatal == nil || !strings.Contains(z.fatal.Error(), "g: mpirun exited with status 1 before ranks 0, 1, 2 of 3 joined") {
		t.Errorf("the launcher exited: %v", z.fatal)
	}
	for range 2 * maxRefusals {
		z.refuse("x", "y")
	}
	if len(z.refused) != maxRefusals {
		t.Errorf("%d refusals kept, bound %d", len(z.refused), maxRefusals)
	}
}

// The launcher's command line: mpirun or srun, the hosts, the user's
// arguments, then the rank program and what it is told.
func TestLaunchArgs(t *testing.T) {
	rank := []string{"/bin/simpler", "remote-l3-worker", "--connect", "h:1"}
	cases := []struct {
		spec     engine.GroupSpec
		loopback bool
		want     string
	}{
		{engine.GroupSpec{Launcher: "mpirun", Ranks: 4}, true, "mpirun -np 4 --oversubscribe --bind-to none /bin/simpler remote-l3-worker --connect h:1"},
		{engine.GroupSpec{Launcher: "mpirun", Ranks: 4}, false, "mpirun -np 4 --bind-to none /bin/simpler remote-l3-worker --connect h:1"},
		{engine.GroupSpec{Launcher: "mpirun", Ranks: 2, LauncherArgs: []string{"--map-by", "node"}}, true, "mpirun -np 2 --bind-to none --map-by node /bin/simpler remote-l3-worker --connect h:1"},
		{engine.GroupSpec{Launcher: "mpirun", Ranks: 2, Hosts: []string{"a:1", "b:1"}, LauncherArgs: []string{"-x", "V"}}, false, "mpirun -np 2 --host a:1,b:1 --bind-to none -x V /bin/simpler remote-l3-worker --connect h:1"},
		{engine.GroupSpec{Launcher: "mpirun", Ranks: 2, LauncherArgs: []string{"--bind-to", "core"}}, true, "mpirun -np 2 --oversubscribe --bind-to core /bin/simpler remote-l3-worker --connect h:1"},
		{engine.GroupSpec{Launcher: "mpirun", Ranks: 2, LauncherArgs: []string{"--oversubscribe", "--cpu-set=0,1"}}, true, "mpirun -np 2 --oversubscribe --cpu-set=0,1 /bin/simpler remote-l3-worker --connect h:1"},
		{engine.GroupSpec{Launcher: "srun", Ranks: 8, Hosts: []string{"n1", "n2"}}, false, "srun --ntasks 8 --nodelist n1,n2 /bin/simpler remote-l3-worker --connect h:1"},
	}
	for _, c := range cases {
		if got := strings.Join(launchArgs(c.spec, rank, c.loopback), " "); got != c.want {
			t.Errorf("%+v:\n got  %s\n want %s", c.spec, got, c.want)
		}
	}
	spec := engine.GroupSpec{Platform: "a5sim", DeviceIDs: []int{0, 3}}
	if got := strings.Join(rankArgs(spec, "10.1.1.1:7000", "/run/t", 1500*time.Millisecond), " "); got != "--connect 10.1.1.1:7000 --token-file /run/t --platform a5sim --devices 0,3 --connect-timeout 1.5s" {
		t.Errorf("rank args: %s", got)
	}
	for addr, want := range map[string]bool{"127.0.0.1:0": true, "[::1]:5": true, "localhost:1": true, "0.0.0.0:1": false, "10.0.0.1:1": false, "[::]:1": false} {
		if isLoopbackAddr(addr) != want {
			t.Errorf("isLoopbackAddr(%q) = %v", addr, !want)
		}
	}
}

// The tail keeps the last lines, each bounded, however much is written.
func TestTail(t *testing.T) {
	var tl tail
	for i := range 3 * tailLines {
		tl.Write([]byte(strings.Repeat("x", i) + "\n\n-----\n"))
	}
	tl.Write([]byte("partial " + strings.Repeat("y", 2*tailWidth)))
	got := strings.Split(strings.TrimPrefix(tl.String(), "\n    "), "\n    ")
	if len(got) != tailLines+1 || got[0] != strings.Repeat("x", 2*tailLines) || len(got[tailLines]) != tailWidth {
		t.Errorf("%d lines, first %q, last of %d bytes", len(got), got[0][:min(10, len(got[0]))], len(got[len(got)-1]))
	}
	long := tail{}
	long.Write([]byte(strings.Repeat("z", 3*tailWidth) + "\nend\n"))
	if s := long.String(); s != "\n    "+strings.Repeat("z", tailWidth)+"\n    end" {
		t.Errorf("a long line: %q", s)
	}
}

// A rank's number comes from the first launcher variable set; none set,
// or one that is not a rank, is an error that says which.
func TestRankFromEnv(t *testing.T) {
	for i, name := range RankEnv {
		env := map[string]string{name: "7"}
		for _, later := range RankEnv[i+1:] {
			env[later] = "9" // a later variable loses
		}
		r, from, err := RankFromEnv(func(k string) string { return env[k] })
		if err != nil || r != 7 || from != name {
			t.Errorf("$%s=7: rank %d from %s, %v", name, r, from, err)
		}
	}
	_, _, err := RankFromEnv(func(string) string { return "" })
	if err == nil || engine.KindOf(err) != engine.ValueError || !strings.Contains(err.Error(), "give --rank N") {
		t.Fatalf("no variable: %v", err)
	}
	for _, name := range RankEnv {
		if !strings.Contains(err.Error(), "$"+name) {
			t.Errorf("the error does not name $%s: %v", name, err)
		}
	}
	for _, bad := range []string{"x", "-1", "4096", "1e3"} {
		_, from, err := RankFromEnv(func(k string) string {
			if k == "SLURM_PROCID" {
				return bad
			}
			return ""
		})
		if err == nil || from != "SLURM_PROCID" || !strings.Contains(err.Error(), `$SLURM_PROCID is "`+bad+`"`) {
			t.Errorf("SLURM_PROCID=%s: %v", bad, err)
		}
	}
}
