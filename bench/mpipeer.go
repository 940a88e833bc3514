package bench

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The Open MPI peer: peers/mpi_coll.c, embedded, built with mpicc when it
// is installed and run with mpirun beside simpler's collectives in the
// same run, with the shared-memory settings the workplace's peers kit
// uses (pml ob1, btl self,vader; glibc's mmap threshold raised so Open
// MPI reuses its temporary buffers).

//go:embed peers/mpi_coll.c
var mpiCollSource []byte

// mpiTimeout bounds each mpirun: a run of allreduce over every size
// takes about 20 s on two loaded cores.
const mpiTimeout = 3 * time.Minute

// mpiFigures are the peer's medians, by rank count: allreduce per size
// (bytes) and the window allocate+free time.
type mpiFigures struct {
	allreduce map[int]map[int]time.Duration // ranks -> bytes -> median
	window    map[int]time.Duration         // ranks -> MPI_Win_allocate + MPI_Win_free, 4 KiB
	note      string                        // how it ran, or why it did not
}

// runMPIPeer builds and runs the peer for each rank count. It returns nil
// figures (and the reason in note) when Open MPI is not installed; an
// installed peer that fails to build or run is an error.
func runMPIPeer(ranks []int, small, big int) (*mpiFigures, string, error) {
	mpicc, err1 := exec.LookPath("mpicc")
	mpirun, err2 := exec.LookPath("mpirun")
	if err1 != nil || err2 != nil {
		return nil, "Open MPI peer not measured: mpicc and mpirun are not both on PATH", nil
	}
	dir, err := os.MkdirTemp("", "simpler-mpi-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	src, bin := filepath.Join(dir, "mpi_coll.c"), filepath.Join(dir, "mpi_coll")
	if err := os.WriteFile(src, mpiCollSource, 0o600); err != nil {
		return nil, "", err
	}
	if out, err := runBounded(exec.Command(mpicc, "-O2", "-o", bin, src)); err != nil {
		return nil, "", fmt.Errorf("building the Open MPI peer: %v\n%s", err, out)
	}
	env := append(os.Environ(), "OPS=allreduce", "OMPI_MCA_btl_base_warn_component_unused=0")
	note := "Open MPI peer: bench/peers/mpi_coll.c, mpicc -O2, mpirun --oversubscribe --bind-to none, pml ob1, btl self,vader"
	if consent := mpirunConsent(); consent != nil {
		env = append(env, consent...)
		note += "; running as root, the bench set " + strings.Join(consent, " ") + " for mpirun only"
	}
	f := &mpiFigures{allreduce: map[int]map[int]time.Duration{}, window: map[int]time.Duration{}}
	for _, n := range ranks {
		base := []string{"--oversubscribe", "--bind-to", "none", "--mca", "pml", "ob1", "--mca", "btl", "self,vader", "-np", strconv.Itoa(n)}
		coll := append(append([]string{}, base...), "-x", "MALLOC_MMAP_THRESHOLD_=4294967296", "-x", "MALLOC_TRIM_THRESHOLD_=4294967296",
			bin, "coll", strconv.Itoa(small), strconv.Itoa(big))
		win := append(append([]string{}, base...), bin, "win", strconv.Itoa(small))
		for _, args := range [][]string{coll, win} {
			c := exec.Command(mpirun, args...)
			c.Env = env
			out, err := runBounded(c)
			if err != nil {
				return nil, "", fmt.Errorf("the Open MPI peer, %d ranks: %v\n%s", n, err, out)
			}
			if err := f.parse(n, out); err != nil {
				return nil, "", err
			}
		}
	}
	return f, note, nil
}

// runBounded runs c in its own process group and kills the group if it
// outlives mpiTimeout (mpirun's ranks are its children).
func runBounded(c *exec.Cmd) ([]byte, error) {
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), mpiTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		return out.Bytes(), err
	case <-ctx.Done():
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		<-done
		return out.Bytes(), fmt.Errorf("no end within %v; killed", mpiTimeout)
	}
}

// parse reads the peer's ROW and WIN lines for n ranks ("ROW op=allreduce
// np=4 bytes=4096 ... us=52.48 ... ok=1", "WIN np=4 bytes=4096 ...
// alloc_free_us=345.0 ..."); other lines are mpirun's and ignored.
func (f *mpiFigures) parse(n int, out []byte) error {
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || (fields[0] != "ROW" && fields[0] != "WIN") {
			continue
		}
		kv := map[string]string{}
		for _, fl := range fields[1:] {
			if k, v, ok := strings.Cut(fl, "="); ok {
				kv[k] = v
			}
		}
		if np, err := strconv.Atoi(kv["np"]); err != nil || np != n {
			return fmt.Errorf("the Open MPI peer printed %q for %d ranks", line, n)
		}
		size, err := strconv.Atoi(kv["bytes"])
		if err != nil || size <= 0 {
			return fmt.Errorf("the Open MPI peer printed %q: bad bytes", line)
		}
		key := "us"
		if fields[0] == "WIN" {
			key = "alloc_free_us"
		} else if kv["ok"] != "1" {
			return fmt.Errorf("the Open MPI peer's own check failed: %q", line)
		}
		us, err := strconv.ParseFloat(kv[key], 64)
		if err != nil || !(us >= 0 && us <= 1e9) { // NaN fails both
			return fmt.Errorf("the Open MPI peer printed %q: bad %s", line, key)
		}
		d := time.Duration(us * float64(time.Microsecond))
		if fields[0] == "WIN" {
			f.window[n] = d
			continue
		}
		if kv["op"] == "allreduce" {
			if f.allreduce[n] == nil {
				f.allreduce[n] = map[int]time.Duration{}
			}
			f.allreduce[n][size] = d
		}
	}
	if f.allreduce[n] == nil && f.window[n] == 0 {
		return fmt.Errorf("the Open MPI peer printed no figures for %d ranks:\n%s", n, out)
	}
	return nil
}
